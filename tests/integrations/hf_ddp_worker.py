"""One rank of a two-process Hugging Face Trainer run with ZeusBSOTrainerCallback (gloo, CPU).

Started by ``torch.distributed.run`` from test_huggingface.py; writes what this rank saw to
``<out>/rank<RANK>.json``.

    python -m torch.distributed.run --nproc_per_node 2 tests/integrations/hf_ddp_worker.py \
        SERVER_URL JOB_ID OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import transformers
from accelerate import PartialState

from tests.integrations.test_huggingface import BatchSizeSpy, TokenDataset, accuracy, job
from zeus_bso.energy import EstimateMeter
from zeus_bso.huggingface import ZeusBSOTrainerCallback


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    # Rank 1 reads the batch size from rank 0: the process group must exist first.
    PartialState(cpu=True, backend="gloo")
    callback = ZeusBSOTrainerCallback(
        server_url,
        job(job_id, target=0.999),
        metric="eval_accuracy",
        energy_meter=EstimateMeter(100),
    )
    spy = BatchSizeSpy()
    args = transformers.TrainingArguments(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=callback.batch_size,
        per_device_eval_batch_size=64,
        num_train_epochs=10,  # more than the job's max_epochs (6): the server's stop ends it
        learning_rate=5e-3,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        ddp_backend="gloo",
    )
    transformers.set_seed(0)
    config = transformers.BertConfig(
        vocab_size=24,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    trainer = transformers.Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=accuracy,
        callbacks=[callback, spy],
    )
    trainer.train()
    rank = int(os.environ["RANK"])
    seen = {
        "world_size": trainer.args.world_size,
        "batch_size": callback.batch_size,
        "loader_batch_sizes": spy.sizes,
        "epochs": trainer.state.epoch,
        "trial_number": callback.trial_number,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
