"""A Hugging Face Trainer with a warm-up (``warmup_steps``), a cosine schedule and gradient
accumulation (micro-batches of at most 8 samples), on a model of the script's own; with
``--own-optimizer``, as the Transformers examples are written: TrainingArguments parsed from a
command line (``HfArgumentParser``), the batch size set on them, and the script's optimizer and
linear warm-up schedule, sized from that batch size, passed to the Trainer
(``optimizers=(optimizer, schedule)``).

    python hf_trainer.py --job NAME --output-dir DIR [--target 0.9] [--oom-above N --attempts 2]
        [--save] [--resume] [--kill-at-epoch N [--kill-after-report]] [--own-optimizer]
        [--eval-sets [--metric NAME]]

With ``--eval-sets`` the Trainer evaluates two datasets (``eval_dataset`` a dict, as HF's
``Trainer`` takes it: each one's metrics prefixed with its name), the training data first, and
the run's metric is the other's (``eval_held_out_accuracy``, or ``--metric``).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import torch
import transformers

from tests.scripts.faults import hf_kill_at_epoch, out_of_memory_above
from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 7, generator=g)
        self.labels = (self.x[:, 0] + self.x[:, 5] > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.labels[i]}


class Classifier(torch.nn.Module):
    def __init__(self, oom_above: int = 0) -> None:
        super().__init__()
        self.oom_above = oom_above
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        if self.training:
            out_of_memory_above(self.oom_above, x)
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def accuracy(prediction) -> dict[str, float]:
    logits, labels = prediction
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--save", action="store_true", help="a checkpoint every epoch")
    parser.add_argument("--resume", action="store_true", help="from the last checkpoint")
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--kill-after-report", action="store_true")
    parser.add_argument(
        "--own-optimizer",
        action="store_true",
        help="parsed TrainingArguments, and the script's optimizer and schedule for the Trainer",
    )
    parser.add_argument("--eval-sets", action="store_true", help="two evaluation datasets")
    parser.add_argument("--metric", default="eval_held_out_accuracy", help="with --eval-sets")
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOTrainerCallback(
            job=job,
            metric=args.metric if args.eval_sets else "eval_accuracy",
            lr_rule="linear",
            max_micro_batch_size=8,
            resume_from_checkpoint=args.resume or None,
            output_dir=args.output_dir,
        )
        train(callback, args, job.max_epochs)
        return callback.outcome

    # A run whose micro-batches ran out of memory before it trained is followed by another,
    # with smaller ones; one without a model by another at the next batch size.
    outcome = until_converged(one_run, attempts=args.attempts)
    return 0 if outcome is not None and outcome.converged else 1


def parsed_arguments(args: argparse.Namespace, epochs: int) -> Any:
    """TrainingArguments as the Transformers examples build them, from the command line
    (``HfArgumentParser``), at a batch size of the command line's."""
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    command_line = [
        *("--output_dir", args.output_dir, "--per_device_train_batch_size", "16"),
        *("--num_train_epochs", str(epochs), "--eval_strategy", "epoch"),
        *("--save_strategy", "no", "--logging_strategy", "no", "--report_to", "none"),
        *("--disable_tqdm", "true", *(["--use_cpu"] if ON_CPU else [])),
        *(["--bf16"] if BF16 else []),
    ]
    (training,) = parser.parse_args_into_dataclasses(args=command_line)
    return training


def train(callback: ZeusBSOTrainerCallback, args: argparse.Namespace, epochs: int) -> None:
    if args.own_optimizer:  # the size set on the parsed arguments, before the Trainer is built
        training = parsed_arguments(args, epochs)
        training.per_device_train_batch_size = callback.start()
        training.gradient_accumulation_steps = callback.accumulation_steps
        train_with(callback, args, epochs, training)
        return
    training = transformers.TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=callback.start(),
        gradient_accumulation_steps=callback.accumulation_steps,
        num_train_epochs=epochs,
        learning_rate=0.1,
        optim="sgd",
        lr_scheduler_type="cosine",
        warmup_steps=2,
        eval_strategy="epoch",
        save_strategy="epoch" if args.save else "no",
        logging_strategy="no",
        report_to=[],
        use_cpu=ON_CPU,
        bf16=BF16,
        disable_tqdm=True,
    )
    train_with(callback, args, epochs, training)


def train_with(
    callback: ZeusBSOTrainerCallback, args: argparse.Namespace, epochs: int, training: Any
) -> None:
    model = Classifier(args.oom_above)
    optimizers: tuple[Any, Any] = (None, None)
    if args.own_optimizer:  # sized as such scripts size it: optimizer steps of the whole run
        train_set = Points(96, 0)
        per_step = training.per_device_train_batch_size * training.gradient_accumulation_steps
        steps = math.ceil(len(train_set) / per_step) * epochs
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, 2, steps)
        optimizers = (optimizer, schedule)
    trainer = transformers.Trainer(
        model=model,
        optimizers=optimizers,
        args=training,
        train_dataset=Points(96, 0),
        eval_dataset={"seen": Points(64, 0), "held_out": Points(64, 1)}
        if args.eval_sets
        else Points(64, 1),
        compute_metrics=accuracy,
        callbacks=[callback, hf_kill_at_epoch(args.kill_at_epoch, args.kill_after_report)],
    )
    trainer.train(resume_from_checkpoint=args.resume or None)


if __name__ == "__main__":
    sys.exit(main())
