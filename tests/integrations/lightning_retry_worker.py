"""A Lightning DDP fit of two processes (gloo, CPU, Lightning's own launcher) under
`zeus_bso.until_converged`, whose model runs out of memory while it trains (past the memory
check) at batches of more than 16 samples: on rank 1 alone, or on every rank.

    python tests/integrations/lightning_retry_worker.py SERVER_URL JOB_ID OUT_DIR (1|all)
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy

from tests.integrations.lightning_models import TinyClassifier, job, quiet_trainer_options
from zeus_bso import RunOutcome, until_converged
from zeus_bso.client import every_rank as ran_out
from zeus_bso.integrations.lightning import ZeusBSOCallback


class RunsOutMidRun(TinyClassifier):
    """Out of memory above 16 samples from its fifth training step (the memory check's three
    fit), on ``rank`` (None: every rank)."""

    def __init__(self, rank: int | None) -> None:
        super().__init__()
        self.oom_rank, self.steps = rank, 0

    def training_step(self, batch: Any, index: int) -> Any:
        self.steps += 1
        if len(batch[0]) > 16 and self.steps > 4 and self.oom_rank in (None, self.global_rank):
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {len(batch[0])} MiB"
            )
        return super().training_step(batch, index)


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    rank = None if sys.argv[4] == "all" else int(sys.argv[4])
    # A rank that ran out waits this long for the others to say they did (30 s in a run): the
    # ranks of this run step together, so all that run out say it within a step of each other.
    ran_out.PATIENCE_S = 8.0
    spec = job(job_id, target=0.999, max_epochs=2)

    def recurrence() -> RunOutcome | None:
        pl.seed_everything(0, verbose=False)
        callback = ZeusBSOCallback(server_url, spec, "val_acc")
        trainer = pl.Trainer(
            callbacks=[callback],
            max_epochs=2,
            devices=2,
            strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(minutes=2)),
            **quiet_trainer_options(out / f"rank{os.environ.get('LOCAL_RANK', '0')}"),
        )
        trainer.fit(RunsOutMidRun(rank))
        return callback.outcome

    until_converged(recurrence, attempts=2)


if __name__ == "__main__":
    main()
