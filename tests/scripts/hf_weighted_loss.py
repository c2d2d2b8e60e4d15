"""A Hugging Face Trainer subclass whose ``compute_loss`` weighs the classes, as scripts for
imbalanced data write it, on a model of the script's own: a plain ``nn.Module`` whose
``forward`` takes the inputs alone and returns logits (the labels popped by ``compute_loss``,
named to the Trainer by ``label_names``); the arguments' own batch size, which the callback
replaces with the server's (and the micro-batches an optimizer step, with
``--max-micro-batch-size``) as the Trainer is built.

    python hf_weighted_loss.py --job NAME --output-dir DIR [--target 0.9]
        [--oom-above N [--oom-after STEPS]] [--oom-in-evaluation] [--oom-in-loss-above N]
        [--max-micro-batch-size N] [--attempts N]

With ``--attempts`` above 1, a recurrence trains until one run delivers a model
(`zeus_bso.until_converged`), without ``with callback:`` (the Trainer calls no callback when
``train()`` raises).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import transformers

from tests.scripts.faults import OutOfMemoryLater, out_of_memory_above
from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 7, generator=g)
        self.labels = (self.x[:, 1] + self.x[:, 6] > 0.5).long()  # fewer ones than zeros

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.labels[i]}


class Classifier(torch.nn.Module):
    def __init__(self, oom_above: int = 0, oom_after: int = 0, in_evaluation: bool = False) -> None:
        super().__init__()
        self.out_of_memory = OutOfMemoryLater(oom_above, oom_after)
        self.out_of_memory_in_evaluation = in_evaluation
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.out_of_memory(x)
        elif self.out_of_memory_in_evaluation:  # the logits gathered: the evaluation's own
            out_of_memory_above(1, x)
        return self.net(x)


class WeightedLossTrainer(transformers.Trainer):
    def __init__(self, *args: Any, loss_oom_above: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss_oom_above = loss_oom_above

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        if model.training:  # what a loss of its own holds (a teacher's, a second view's)
            out_of_memory_above(self.loss_oom_above, labels)
        logits = model(**inputs)
        weight = torch.tensor([1.0, 2.0], device=logits.device)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels, weight=weight)
        return (loss, {"logits": logits}) if return_outputs else loss


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--oom-after", type=int, default=0)
    parser.add_argument("--oom-in-evaluation", action="store_true")
    parser.add_argument("--oom-in-loss-above", type=int, default=0)
    parser.add_argument("--max-micro-batch-size", type=int, default=None)
    parser.add_argument("--attempts", type=int, default=1)
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
            metric="accuracy",
            lr_rule="linear",
            max_micro_batch_size=args.max_micro_batch_size,
        )
        training = transformers.TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=16,  # the callback sets the server's as Trainer is built
            num_train_epochs=job.max_epochs,
            learning_rate=0.1,
            optim="sgd",
            label_names=["labels"],
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        torch.manual_seed(0)
        WeightedLossTrainer(
            model=Classifier(args.oom_above, args.oom_after, args.oom_in_evaluation),
            args=training,
            train_dataset=Points(96, 0),
            eval_dataset=Points(64, 1),
            compute_metrics=accuracy,
            callbacks=[callback],
            loss_oom_above=args.oom_in_loss_above,
        ).train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=args.attempts) if args.attempts > 1 else one_run()
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
