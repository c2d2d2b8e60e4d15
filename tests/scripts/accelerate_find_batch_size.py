"""An Accelerate loop in the shape of Accelerate's ``examples/by_feature/memory.py``: everything
from the model to the scheduler is built inside a function under ``find_executable_batch_size``,
which, after an out-of-memory error, frees the accelerator's memory and calls it again at 0.9
of the batch size. The batch size it starts from is zeus-bso's.

    python accelerate_find_batch_size.py --job NAME [--target 0.85] [--oom-above N]
        [--keep-memory] [--rate-by-hand] [--accumulate-to-start]

``--keep-memory``: the function does not call ``accelerator.free_memory()`` (the accelerator
keeps what it prepared before, as scripts that leave the call out do). ``--rate-by-hand``: the
optimizer is built at ``bso.learning_rate(0.1)`` instead of scaled by ``bso.scale``.
``--accumulate-to-start``: the shape of Accelerate's ``automatic_gradient_accumulation.py``, whose
accelerator accumulates the starting size over the smaller size's batches (``accelerator.
gradient_accumulation_steps = starting // batch_size``, each step in ``accelerator.accumulate``).
"""

from __future__ import annotations

import argparse
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_linear_schedule_with_warmup

from tests.scripts.faults import out_of_memory_above
from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec
from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

EVAL_BATCH_SIZE = 32


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 3] - x[:, 6] > 0).long())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--keep-memory", action="store_true")
    parser.add_argument("--rate-by-hand", action="store_true")
    parser.add_argument("--accumulate-to-start", action="store_true")
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    accelerator = Accelerator(cpu=ON_CPU, mixed_precision="bf16" if BF16 else "no")
    with ZeusBSOAccelerate(accelerator, job=job, lr_rule="linear") as bso:
        starting = bso.batch_size

        @find_executable_batch_size(starting_batch_size=starting)
        def inner_training_loop(batch_size: int) -> None:
            if args.accumulate_to_start:
                accelerator.gradient_accumulation_steps = starting // batch_size
            if not args.keep_memory:
                accelerator.free_memory()  # what the last try prepared
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
            )
            rate = bso.learning_rate(0.1) if args.rate_by_hand else 0.1
            optimizer = torch.optim.SGD(model.parameters(), lr=rate)
            train_loader = DataLoader(dataset(96, 0), batch_size=batch_size, shuffle=True)
            eval_loader = DataLoader(dataset(64, 1), batch_size=EVAL_BATCH_SIZE)
            scheduler = get_linear_schedule_with_warmup(
                optimizer, num_warmup_steps=2, num_training_steps=len(train_loader) * 4
            )
            model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
                model, optimizer, train_loader, eval_loader, scheduler
            )
            if not args.rate_by_hand:
                bso.scale(optimizer, scheduler)
            bso.train_begin(len(train_loader))
            for _ in range(job.max_epochs):
                model.train()
                for x, y in train_loader:
                    with accelerator.accumulate(model):  # each step, where it accumulates none
                        out_of_memory_above(args.oom_above, x)
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        accelerator.backward(loss)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad()
                model.eval()
                right = 0
                for x, y in eval_loader:
                    with torch.no_grad():
                        right += int((model(x).argmax(1) == y).sum())
                if bso.report(right / len(eval_loader.dataset)):
                    break

        inner_training_loop()
    outcome = bso.outcome
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
