"""ServerClient against a real server through a transport that resets chosen requests before
they are sent, as a kept-alive connection the server has just closed does: an idempotent
request is sent once more and answered; one that starts a trial is not sent twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import ServerProcess, sqlite_url, unique_id
from zeus_bso.client import ServerClient
from zeus_bso.errors import ServerConnectionError
from zeus_bso.spec import JobSpecFromClient


class ResetBeforeSending(httpx.HTTPTransport):
    """The real transport, but the next ``resets`` requests fail as a reset connection does."""

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.resets:
            self.resets -= 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return super().handle_request(request)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("resets")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp)
    yield proc
    proc.stop()


def _job(job_id: str) -> JobSpecFromClient:
    return JobSpecFromClient(job_id=job_id, job_id_prefix=job_id.split("-")[0],
                             batch_sizes=[32, 64], default_batch_size=32, max_power=300.0,
                             number_of_gpus=1, gpu_model="A100")  # fmt: skip


def _client(server: ServerProcess) -> tuple[ServerClient, ResetBeforeSending]:
    transport = ResetBeforeSending()
    return ServerClient(server.url, transport=transport), transport


def test_an_idempotent_request_is_sent_once_more_after_a_reset(server: ServerProcess) -> None:
    client, transport = _client(server)
    with client:
        job_id = unique_id("reset")
        client.register_job(_job(job_id))
        transport.resets = 1
        state: dict[str, Any] = client.job_state(job_id)
        assert state["job"]["job_id"] == job_id
        transport.resets = 2  # a second reset in a row: the server is not there
        with pytest.raises(ServerConnectionError):
            client.job_state(job_id)


def test_a_request_that_starts_a_trial_is_not_sent_twice(server: ServerProcess) -> None:
    client, transport = _client(server)
    with client:
        job_id = unique_id("once")
        client.register_job(_job(job_id))
        transport.resets = 1
        with pytest.raises(ServerConnectionError):
            client.dispatch(job_id)
        assert client.job_state(job_id)["trials"] == []
        # With a run key the same request is idempotent (it continues the run's trial).
        transport.resets = 1
        trial = client.dispatch(job_id, run_key="run-1")
        assert client.dispatch(job_id, run_key="run-1").trial_number == trial.trial_number
