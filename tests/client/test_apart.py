"""A process of a run other than the main one that runs out of memory marks the trial itself
(`zeus_bso.training.apart`): here at its exit, where nothing of its framework's heard the
error (the HF Trainer's ranks). Lightning's ranks: `tests/integrations/test_lightning.py`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, unique_id
from tests.proxy import ReverseProxy
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter

pytest.importorskip("torch", reason="out of memory is torch's error")

ROOT = Path(__file__).resolve().parents[2]

RANK_ONE = """
import sys
import torch
from zeus_bso.spec import TrialId
from zeus_bso.training.apart import RanOutAtExit
from zeus_bso.training.server_settings import ServerSettings

url, job_id, size, error = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if len(sys.argv) > 5:
    import zeus_bso.training.apart as apart
    apart.PATIENCE_S = float(sys.argv[5])
settings = ServerSettings(url, None, "none", None, "fallback", None, 5.0, None, False)
RanOutAtExit(settings).watch(TrialId(job_id=job_id, batch_size=size, trial_number=1))
if error == "oom":
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
raise ValueError("a bug of the script's")
"""


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


def _rank_zero(server: ServerProcess, prefix: str) -> BatchSizeOptimizer:
    """Rank 0's run of a new job, with its trial."""
    job = JobSpec(
        job_id_prefix=unique_id(prefix).replace("-", ""),
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=2,
    )
    bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100))
    bso.get_batch_size()
    return bso


def _rank_one(url: str, bso: BatchSizeOptimizer, *args: str) -> subprocess.CompletedProcess[str]:
    """Rank 1's process (`RANK_ONE`) on ``bso``'s trial through the server at ``url``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", RANK_ONE, url, bso.job_id, str(bso.batch_size), *args],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("error", "status"), [("oom", "infeasible"), ("bug", "dispatched")])
def test_a_rank_that_exits_out_of_memory_marks_the_trial_infeasible(
    server: ServerProcess, error: str, status: str
) -> None:
    """Rank 0 holds the trial; rank 1's process ends with out of memory, which rank 0 never
    hears of: rank 1's exit marks the trial infeasible. Any other error is left to rank 0."""
    bso = _rank_zero(server, "apart")
    ended = _rank_one(server.url, bso, error)
    assert ended.returncode == 1, ended.stderr
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert trial["status"] == status
    if error == "oom":
        assert "marked infeasible on these GPUs from here" in ended.stderr
    bso.release("the test is over")


def test_a_rank_that_ran_out_waits_on_a_hung_server_at_most_its_patience(
    server: ServerProcess,
) -> None:
    """A rank's mark waits on the server, its answer and retries together, at most `PATIENCE_S`
    (1 s here): the run's other processes wait for it before they start the next attempt
    together (`zeus_bso.until_converged`), and a server that hung held it for the client's
    30 s timeout."""
    bso = _rank_zero(server, "aparthung")
    proxy = ReverseProxy(server.url, down_on="/api/trials/infeasible")
    proxy.delay = 60.0
    try:
        started = time.monotonic()
        ended = _rank_one(proxy.url, bso, "oom", "1.0")
        took = time.monotonic() - started
    finally:
        proxy.close()
    assert ended.returncode == 1, ended.stderr
    assert "could not mark trial 1 infeasible" in ended.stderr
    assert took < 15.0  # the interpreter's start, the import of torch, and 1 s
    bso.release("the test is over")
