"""A Hugging Face Trainer script written as the Transformers example scripts (``run_glue.py``,
``run_clm.py``) are: its own arguments and ``TrainingArguments`` parsed from the command line
(``HfArgumentParser``), the last checkpoint in ``output_dir`` detected before the Trainer is
built, and ``trainer.train(resume_from_checkpoint=...)`` given the arguments' checkpoint, else
that one; the callback among the Trainer's callbacks, given no checkpoint (it finds the same).
Then the example's ending: ``save_model``, ``log_metrics``, ``save_metrics``, ``save_state``.

    python hf_example_script.py --job NAME --output_dir DIR [--target 0.9]
        [--save_strategy epoch] [--resume_from_checkpoint DIR]
        [--kill-at-epoch N [--kill-after-report]] [--from-scratch] [any TrainingArguments]

A run killed in ``output_dir`` and launched again with the same command line resumes there.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field

import torch
import transformers
from transformers.trainer_utils import get_last_checkpoint

from tests.scripts.faults import hf_kill_at_epoch
from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

logger = logging.getLogger(__name__)


@dataclass
class ScriptArguments:
    job: str = field(metadata={"help": "the job's id prefix"})
    target: float = field(default=0.85, metadata={"help": "the target accuracy"})
    kill_at_epoch: int = field(default=0, metadata={"help": "SIGKILL at this epoch's start"})
    kill_after_report: bool = field(default=False, metadata={"help": "after its report"})
    from_scratch: bool = field(
        default=False, metadata={"help": "no checkpoint detected (v4's --overwrite_output_dir)"}
    )


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 7, generator=g)
        self.labels = (self.x[:, 2] - self.x[:, 4] > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.labels[i]}


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def accuracy(prediction) -> dict[str, float]:
    logits, labels = prediction
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def main() -> int:
    parser = transformers.HfArgumentParser((ScriptArguments, transformers.TrainingArguments))
    defaults = [
        *("--do_train", "--per_device_train_batch_size", "16", "--num_train_epochs", "4"),
        *("--eval_strategy", "epoch", "--learning_rate", "0.1", "--optim", "sgd"),
        *("--logging_strategy", "no", "--report_to", "none", "--disable_tqdm", "true"),
        *(["--use_cpu"] if ON_CPU else []),
        *(["--bf16"] if BF16 else []),
    ]
    script_args, training_args = parser.parse_args_into_dataclasses(args=[*defaults, *sys.argv[1:]])
    transformers.set_seed(training_args.seed)

    # Detecting last checkpoint.
    last_checkpoint = None
    output_dir = training_args.output_dir
    if os.path.isdir(output_dir) and training_args.do_train and not script_args.from_scratch:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
            logger.info(f"Checkpoint detected, resuming training at {last_checkpoint}.")

    job = JobSpec(
        job_id_prefix=script_args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=script_args.target,
        max_epochs=4,
    )
    callback = ZeusBSOTrainerCallback(
        job=job, metric="accuracy", lr_rule="linear", raise_if_unconverged=True
    )
    trainer = transformers.Trainer(
        model=Classifier(),
        args=training_args,
        train_dataset=Points(96, 0),
        eval_dataset=Points(64, 1),
        compute_metrics=accuracy,
        callbacks=[
            callback,
            hf_kill_at_epoch(script_args.kill_at_epoch, script_args.kill_after_report),
        ],
    )

    # Training
    checkpoint = None
    if training_args.resume_from_checkpoint is not None:
        checkpoint = training_args.resume_from_checkpoint
    elif last_checkpoint is not None:
        checkpoint = last_checkpoint
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()

    metrics = train_result.metrics
    metrics["train_samples"] = 96
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    return 0


if __name__ == "__main__":
    sys.exit(main())
