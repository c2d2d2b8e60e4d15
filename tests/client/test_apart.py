"""A process of a run other than the main one that runs out of memory marks the trial itself
(`zeus_bso.training.apart`): here at its exit, where nothing of its framework's heard the
error (the HF Trainer's ranks). Lightning's ranks: `tests/integrations/test_lightning.py`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, unique_id
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
settings = ServerSettings(url, None, "none", None, "fallback", None, 5.0, None, False)
RanOutAtExit(settings).watch(TrialId(job_id=job_id, batch_size=size, trial_number=1))
if error == "oom":
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
raise ValueError("a bug of the script's")
"""


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


@pytest.mark.parametrize(("error", "status"), [("oom", "infeasible"), ("bug", "dispatched")])
def test_a_rank_that_exits_out_of_memory_marks_the_trial_infeasible(
    server: ServerProcess, error: str, status: str
) -> None:
    """Rank 0 holds the trial; rank 1's process ends with out of memory, which rank 0 never
    hears of: rank 1's exit marks the trial infeasible. Any other error is left to rank 0."""
    job = JobSpec(
        job_id_prefix=unique_id("apart").replace("-", ""),
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=2,
    )
    bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100))
    size = bso.get_batch_size()
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    ended = subprocess.run(
        [sys.executable, "-c", RANK_ONE, server.url, bso.job_id, str(size), error],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ended.returncode == 1, ended.stderr
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert trial["status"] == status
    if error == "oom":
        assert "marked infeasible on these GPUs from here" in ended.stderr
    bso.release("the test is over")
