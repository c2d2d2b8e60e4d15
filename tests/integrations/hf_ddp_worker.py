"""One rank of a two-process Hugging Face Trainer run with ZeusBSOTrainerCallback (gloo, CPU).

Started by ``torch.distributed.run`` from test_topology.py; writes what this rank saw to
``<out>/rank<RANK>.json``. The callback measures with its default meter (there: NVML's test
double).

    python -m torch.distributed.run --nproc_per_node 2 tests/integrations/hf_ddp_worker.py \
        SERVER_URL JOB_ID OUT_DIR [OOM_ABOVE [AFTER [all]]]

With OOM_ABOVE, rank 1's model (``all``: every rank's) runs out of memory on a training batch
of more than that many samples (from its training forward after the AFTER-th: mid-run), and
the recurrence runs under `until_converged`.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import transformers
from accelerate import PartialState

from tests.integrations.test_huggingface import (
    BatchSizeSpy,
    TokenDataset,
    accuracy,
    job,
    runs_out_of_memory_above,
    tiny_bert,
    training_arguments,
)
from zeus_bso import RunOutcome, until_converged
from zeus_bso.client import every_rank as ran_out
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    oom_above = int(sys.argv[4]) if len(sys.argv) > 4 else None
    after = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    every_rank = sys.argv[6:] == ["all"]
    # A rank that ran out waits this long for the others to say they did (30 s in a run): the
    # ranks of this run step together, so all that run out say it within a step of each other.
    ran_out.PATIENCE_S = 8.0
    if oom_above is None:
        seen, _ = train(server_url, job_id, out)
    else:
        attempts: list[dict[str, object]] = []

        def recurrence() -> RunOutcome | None:
            attempts.append({})
            attempts[-1], outcome = train(server_url, job_id, out, oom_above, after, every_rank)
            return outcome

        until_converged(recurrence, attempts=2)
        seen = {**attempts[-1], "attempts": len(attempts)}
    # The Trainer and its DDP model are gone before the group is: freed after it, the DDP
    # reducer's destructor can wait on Gloo's worker threads while holding the GIL.
    gc.collect()
    state = PartialState()  # the arguments' (ddp_backend="gloo"), made as they were built
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
    state.wait_for_everyone()
    state.destroy_process_group()


def train(
    server_url: str,
    job_id: str,
    out: Path,
    oom_above: int | None = None,
    after: int = 0,
    every_rank: bool = False,
) -> tuple[dict[str, object], RunOutcome | None]:
    """Train under the callback; what this rank saw, and the run's outcome."""
    callback = ZeusBSOTrainerCallback(
        server_url,
        job(job_id, target=0.999),
        metric="eval_accuracy",
    )
    spy = BatchSizeSpy()
    # The arguments' own size, and no start(): as the Trainer is built, rank 0 asks for the
    # run's and every rank sets it (the group made by the arguments, as the Trainer built them).
    args = training_arguments(
        out / "trainer",
        4,
        10,  # more than the job's max_epochs (6): the server's stop ends it
        save_strategy="no",
        ddp_backend="gloo",
    )
    transformers.set_seed(0)
    model = tiny_bert()
    if oom_above is not None and (every_rank or os.environ["RANK"] == "1"):
        model = runs_out_of_memory_above(model, oom_above, after)
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=accuracy,
        callbacks=[callback, spy],
    )
    trainer.train()
    return {
        "world_size": trainer.args.world_size,
        "batch_size": callback.batch_size,
        "loader_batch_sizes": spy.sizes,
        "epochs": trainer.state.epoch,
        "trial_number": callback.trial_number,
    }, callback.outcome


if __name__ == "__main__":
    main()
