"""One rank of a two-process Hugging Face Trainer run with ZeusBSOTrainerCallback (gloo, CPU).

Started by ``torch.distributed.run`` from test_topology.py; writes what this rank saw to
``<out>/rank<RANK>.json``. The callback measures with its default meter (there: NVML's test
double).

    python -m torch.distributed.run --nproc_per_node 2 tests/integrations/hf_ddp_worker.py \
        SERVER_URL JOB_ID OUT_DIR
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
    tiny_bert,
    training_arguments,
)
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    # Rank 1 reads the batch size from rank 0: the process group must exist first.
    state = PartialState(cpu=True, backend="gloo")
    seen = train(server_url, job_id, out)
    # The Trainer and its DDP model are gone before the group is: freed after it, the DDP
    # reducer's destructor can wait on Gloo's worker threads while holding the GIL.
    gc.collect()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
    state.wait_for_everyone()
    state.destroy_process_group()


def train(server_url: str, job_id: str, out: Path) -> dict[str, object]:
    """Train under the callback; what this rank saw."""
    callback = ZeusBSOTrainerCallback(
        server_url,
        job(job_id, target=0.999),
        metric="eval_accuracy",
    )
    spy = BatchSizeSpy()
    args = training_arguments(
        out / "trainer",
        callback.start(),
        10,  # more than the job's max_epochs (6): the server's stop ends it
        save_strategy="no",
        ddp_backend="gloo",
    )
    transformers.set_seed(0)
    trainer = transformers.Trainer(
        model=tiny_bert(),
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
    }


if __name__ == "__main__":
    main()
