"""Upstream Zeus 0.16's own client, unchanged, against our server: what the README promises
("existing Zeus clients work against it unchanged"), run rather than replayed
(`tests/api/test_compat.py` holds the bytes it sends). Each recurrence is a process of upstream's
Python (``.upstream``, which scripts/test installs) running `upstream_client_run.py` in
upstream's loop shape, its ``ZeusMonitor`` measuring one GPU of the NVML double that draws
`WATTS`: the job is registered with upstream's GPU fields, the sizes are explored and reported
with the monitor's time and energy, every run's trial is ended by upstream's ``atexit`` hook, and
a run the server stops unconverged raises upstream's ``ZeusBSOTrainFailError``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ServerProcess, environment_without_settings, sqlite_url, unique_id
from tests.preloaded_python import preloaded
from tests.upstream import UPSTREAM_PYTHON, upstream_missing
from zeus_bso.client import ServerClient
from zeus_bso.testing.gpus import described_gpus

MISSING = upstream_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
SCRIPT = Path(__file__).with_name("upstream_client_run.py")
WATTS = 200.0
GPU = {
    "uuid": "GPU-0000beef-1111-2222-3333-444444444444",
    "name": "NVIDIA A100-SXM4-40GB",
    "watts": WATTS,
    "limit_w": 400.0,
}


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


def recurrence(url: str, job_id: str, *flags: str) -> tuple[int, dict[str, Any]]:
    """One run of upstream's client: its exit status and what it printed."""
    done = subprocess.run(
        [preloaded(UPSTREAM_PYTHON), str(SCRIPT), url, job_id, *flags],  # torch imported once
        env={**environment_without_settings(), **described_gpus([GPU])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def trials_of(url: str, job_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with ServerClient(url) as client:
        state = client.job_state(job_id)
    return state, sorted(state["trials"], key=lambda t: t["trial_number"])


def test_upstream_clients_recurrences_are_learned_from(server: ServerProcess) -> None:
    job_id = unique_id("upclient")
    runs = [recurrence(server.url, job_id) for _ in range(6)]
    state, trials = trials_of(server.url, job_id)
    assert [size["batch_size"] for size in state["batch_sizes"]] == [8, 16, 32, 64]
    assert (state["job"]["default_batch_size"], state["job"]["gpu_model"]) == (32, GPU["name"])
    assert state["job"]["max_power"] == GPU["limit_w"]  # upstream's client reads it off NVML
    # The sizes upstream's client trained are the server's trials, the default first, and each
    # run ended its trial (upstream's atexit PATCH /trials): none is left in flight.
    assert [run["batch_size"] for _, run in runs] == [t["batch_size"] for t in trials]
    assert trials[0]["batch_size"] == 32
    assert len({t["batch_size"] for t in trials}) >= 2  # pruning explored
    assert "dispatched" not in {t["status"] for t in trials}
    converged = [t for t in trials if t["converged"]]
    assert converged, trials
    for trial in converged:  # the monitor's measurement, as upstream's client reports it
        assert trial["status"] == "reported"
        assert trial["energy"] / trial["time"] == pytest.approx(WATTS, rel=0.1), trial
    for status, run in runs:  # a converged run exits cleanly; one stopped unconverged raised
        assert status == (1 if run["failed"] else 0)


@pytest.fixture(scope="module")
def stable_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("stable")
    proc = ServerProcess(
        sqlite_url(tmp / "bso.db"), cwd=tmp, env={"ZEUS_BSO_STABLE_JOB_IDS": "true"}
    )
    yield proc
    proc.stop()


def test_upstream_scripts_without_a_job_id_learn_in_one_job_where_the_server_keeps_ids(
    server: ServerProcess, stable_server: ServerProcess
) -> None:
    """Upstream's docs give the job without a ``job_id``: upstream's server (and ours, by
    default) makes a new job at every registration, which learns nothing across recurrences.
    With ``ZEUS_BSO_STABLE_JOB_IDS`` every recurrence registers the job of its settings."""
    prefix = unique_id("upnoid")
    apart = [recurrence(server.url, f"{prefix}-x", "--no-id")[1]["job_id"] for _ in range(2)]
    assert len(set(apart)) == 2  # upstream's way
    runs = [recurrence(stable_server.url, f"{prefix}-x", "--no-id")[1] for _ in range(3)]
    (job_id,) = {run["job_id"] for run in runs}
    assert job_id.startswith(f"{prefix}-")
    assert job_id not in apart
    _, trials = trials_of(stable_server.url, job_id)
    assert [t["batch_size"] for t in trials] == [run["batch_size"] for run in runs]
    assert [t["kind"] for t in trials][:2] == ["exploration", "exploration"]
    assert len({run["batch_size"] for run in runs}) >= 2  # it explored, as one job


def test_a_run_stopped_unconverged_raises_upstreams_failure(server: ServerProcess) -> None:
    job_id = unique_id("upfail")
    status, run = recurrence(server.url, job_id, "--fail")
    assert (status, run["failed"], run["batch_size"]) == (1, True, 32)
    _, (trial,) = trials_of(server.url, job_id)
    assert (trial["status"], trial["converged"]) == ("reported", False)
    assert trial["epochs"] == run["epochs"]
