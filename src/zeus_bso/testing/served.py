"""What the adapters' contracts share: a real server for their tests, and the trials it stored
of a job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zeus_bso.client import ServerClient
from zeus_bso.spec import JobSpec
from zeus_bso.testing.server import running_server
from zeus_bso.wire.reads import TrialView


class ServedContract:
    """A contract whose tests run against a real server: the ``server_url`` fixture starts one
    for the class (`running_server`: needs ``zeus-bso[server]``); a suite that runs one already
    overrides ``server_url`` with its URL."""

    @pytest.fixture(scope="class")
    @classmethod
    def server_url(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        with running_server(tmp_path_factory.mktemp("zeus-bso-server")) as url:
            yield url

    @staticmethod
    def _trials(server_url: str, job: JobSpec) -> list[TrialView]:
        """The trials of the one job of ``job``'s prefix, oldest first."""
        with ServerClient(server_url) as client:
            (listed,) = client.list_jobs(prefix=job.job_id_prefix)
            return client.trials(listed.job_id)
