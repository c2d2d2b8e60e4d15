"""What the adapters' contracts share: their jobs, a real server for their tests, and the
trials it stored of a job."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from zeus_bso.client import ServerClient
from zeus_bso.spec import JobSpec
from zeus_bso.testing.server import running_server
from zeus_bso.wire.reads import TrialView

WRONG_OPTIONS: tuple[dict[str, Any], ...] = (
    {"on_server_unavailable": "skip"},
    {"lr_rule": "cosine"},
    {"reference_batch_size": 0, "lr_rule": "linear"},
    {"max_micro_batch_size": 0},
)
"""Options of a session that every adapter refuses where it is built, each naming its first
key (`zeus_bso.training.session_options.checked_options`)."""


def contract_job(prefix: str, target_metric: float = 0.9, max_epochs: int = 3) -> JobSpec:
    """A job of the contracts': batch sizes 16, 32 and 64, default 32, under a prefix of its own
    (``prefix`` and a random suffix)."""
    return JobSpec(
        job_id_prefix=f"{prefix}{secrets.token_hex(4)}",
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=target_metric,
        max_epochs=max_epochs,
        learning_curve_stop=False,  # a tiny model's CPU epochs: their costs are timing noise
    )


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

    @staticmethod
    def _chosen_power_limit(server_url: str, job: JobSpec) -> float:
        """The limit of the one power profile the one job of ``job``'s prefix stored."""
        with ServerClient(server_url) as client:
            (listed,) = client.list_jobs(prefix=job.job_id_prefix)
            (profile,) = client.job_state(listed.job_id)["power_profiles"]
        return float(profile["power_limit"])
