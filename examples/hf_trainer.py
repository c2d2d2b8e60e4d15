"""A Hugging Face Trainer with ZeusBSOTrainerCallback, recurrence after recurrence. CPU-only: a
tiny BERT built from a config (nothing is downloaded) on sequences it generates.

    zeus-bso-server serve                      # in another terminal: 'zeus-bso[server]'
    pip install torch 'zeus-bso[hf]'           # where it trains (a CPU torch will do)
    python examples/hf_trainer.py --recurrences 5
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import torch
import transformers
from _common import arguments, recurrences

from zeus_bso import JobSpec, RunOutcome
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


class Sequences(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Label: does token 7 occur in the sequence?"""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 20, (n, 8), generator=g)
        self.labels = (self.ids == 7).any(dim=1).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(8, dtype=torch.long),
            "labels": self.labels[i],
        }


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def main() -> None:
    args = arguments(__doc__)
    job = JobSpec(
        job_id_prefix="example-hf",
        batch_sizes=[8, 16, 32, 64],
        default_batch_size=16,
        target_metric=0.98,
        max_epochs=8,
    )
    output = tempfile.TemporaryDirectory(prefix="zeus-bso-hf-example-")  # removed at exit
    output_dir = output.name

    def one_run() -> RunOutcome | None:
        # learning_rate was tuned at the default batch size (16), where the target comes at the
        # third epoch (a learning curve, not a task learnt in one); 'auto' scales AdamW's by the
        # square root of the batch size's ratio to it.
        callback = ZeusBSOTrainerCallback(
            args.server, job, metric="eval_accuracy", token=args.token, lr_rule="auto"
        )
        config = transformers.BertConfig(
            vocab_size=24,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=16,
            num_labels=2,
        )
        training = transformers.TrainingArguments(
            output_dir=output_dir,  # a temporary directory: nothing is saved (save_strategy)
            per_device_train_batch_size=16,  # the server's replaces it as the Trainer is built
            num_train_epochs=job.max_epochs,
            learning_rate=3e-4,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        transformers.Trainer(
            model=transformers.BertForSequenceClassification(config),
            args=training,
            train_dataset=Sequences(1024, 0),
            eval_dataset=Sequences(256, 1),
            compute_metrics=accuracy,
            callbacks=[callback],
        ).train()
        return callback.outcome  # its line is on stderr already

    # A recurrence delivers a model: a run that stops short is followed by another, at the next
    # batch size the server gives, up to three runs; the script exits 1 if one delivered none.
    with output:
        code = recurrences(one_run, args.recurrences)
    sys.exit(code)


if __name__ == "__main__":
    main()
