"""A process whose DDP communication hook (ElasticBatchSize's) handed a callback to a gloo
worker thread exits 0, however soon after that it ends (see zeus_bso.elastic.callbacks_in_flight).

Without `callbacks_in_flight`, exit_worker.py's ranks died with SIGABRT ("terminate called
without an active exception") in 7 of 10 pairs of runs on a 2-core machine. With it, 70 of 70
pairs beside a CPU-bound process exited 0; under heavier load (a CPU-bound process and the API
tests at once) 1 pair in about 25 still aborted, cause not yet found.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import environment_without_settings

pytest.importorskip("torch", reason="ElasticBatchSize's torch side needs torch")

WORKER = Path(__file__).with_name("exit_worker.py")
ROOT = Path(__file__).parents[2]


def _pair(store: Path) -> list[subprocess.CompletedProcess[str]]:
    ranks = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(store), "tracked"],
            cwd=ROOT,
            env=environment_without_settings() | {"PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    done = []
    for rank in ranks:
        out, err = rank.communicate(timeout=90)
        done.append(subprocess.CompletedProcess(rank.args, rank.returncode, out, err))
    return done


@pytest.mark.timeout(300)
def test_a_rank_that_ends_while_a_worker_holds_the_hooks_callback_exits_0(tmp_path: Path) -> None:
    for rank, result in enumerate(_pair(tmp_path / "store")):
        assert result.returncode == 0, f"rank {rank}: {result.returncode}\n{result.stderr[-2000:]}"
        assert "terminate called" not in result.stderr
