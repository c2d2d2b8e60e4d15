"""A process that ends while a gloo worker thread still holds Python work exits 0: the DDP hook's
chained callback, or the tensor of a collective whose caller dropped it (see
zeus_bso.training.clean_exit and zeus_bso.training.clean_exit).

With both turned off (exit_worker.py ... off), on a 2-core machine beside a CPU-bound process,
every rank of 8 pairs died with SIGABRT ("terminate called without an active exception") in the
collective scenario, and 7 of 8 pairs in the hook scenario; with them on, none of 16 pairs did.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import environment_without_settings
from tests.preloaded_python import preloaded

pytest.importorskip("torch", reason="ElasticBatchSize's torch side needs torch")

WORKER = Path(__file__).with_name("exit_worker.py")
ROOT = Path(__file__).parents[2]


def _pair(store: Path, scenario: str) -> list[subprocess.CompletedProcess[str]]:
    ranks = [
        subprocess.Popen(
            [preloaded(sys.executable), str(WORKER), str(rank), str(store), scenario, "on"],
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
@pytest.mark.parametrize("scenario", ["hook", "collective"])
def test_a_rank_that_ends_while_a_gloo_worker_holds_python_work_exits_0(
    scenario: str, tmp_path: Path
) -> None:
    for rank, result in enumerate(_pair(tmp_path / "store", scenario)):
        assert result.returncode == 0, f"rank {rank}: {result.returncode}\n{result.stderr[-2000:]}"
        assert "terminate called" not in result.stderr
