"""An Accelerate training loop with transformers' ``get_scheduler`` (linear warm-up, then
linear decay), sized from the prepared DataLoader, saved and resumed with
``accelerator.save_state`` and ``accelerator.load_state`` (the checkpoint's directory given to
zeus-bso as ``resume=``; ``--forget-trial`` leaves it out, as a script written before zeus-bso
would).

    python accelerate_loop.py --job NAME [--target 0.9] [--oom-above N]
        [--save-to DIR] [--resume-from DIR [--forget-trial]] [--kill-at-epoch N] [--attempts N]

With ``--attempts`` above 1, a recurrence runs the loop until one run delivers a model
(`zeus_bso.until_converged`), each with an accelerator of its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_scheduler

from tests.scripts.faults import kill_at_epoch, out_of_memory_above
from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

PROGRESS = "progress.json"
"""Beside the accelerator's state in a checkpoint: the epochs done."""


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 3] - x[:, 6] > 0).long())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--save-to", default=None)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--forget-trial", action="store_true")
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=1)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    val = dataset(64, 1)
    progress = {}
    if args.resume_from:
        progress = json.loads((Path(args.resume_from) / PROGRESS).read_text())
    resume = None if args.forget_trial else args.resume_from

    def one_run() -> RunOutcome | None:
        accelerator = Accelerator(cpu=ON_CPU, mixed_precision="bf16" if BF16 else "no")
        with ZeusBSOAccelerate(accelerator, job=job, lr_rule="linear", resume=resume) as bso:
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
            )
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(dataset(96, 0), batch_size=bso.batch_size, shuffle=True)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            steps = len(loader) * job.max_epochs
            scheduler = get_scheduler(
                "linear", optimizer, num_warmup_steps=steps // 10, num_training_steps=steps
            )
            accelerator.register_for_checkpointing(scheduler)
            if args.resume_from:
                accelerator.load_state(args.resume_from)
            bso.scale(optimizer, scheduler)
            bso.train_begin(len(loader))
            for epoch in range(progress.get("epoch", 0), job.max_epochs):
                kill_at_epoch(args.kill_at_epoch, epoch)
                model.train()
                for x, y in loader:
                    bso.step_begin(x)  # its first batch is checked against the batch size
                    out_of_memory_above(args.oom_above, x)
                    optimizer.zero_grad()
                    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
                    optimizer.step()
                    scheduler.step()
                model.eval()
                with torch.no_grad():
                    x, y = (t.to(accelerator.device) for t in val.tensors)
                    accuracy = (model(x).argmax(1) == y).float().mean()
                stop = bso.report(float(accuracy))
                if args.save_to:
                    accelerator.save_state(args.save_to)
                    (Path(args.save_to) / PROGRESS).write_text(json.dumps({"epoch": epoch + 1}))
                if stop:
                    break
        return bso.outcome

    outcome = until_converged(one_run, attempts=args.attempts) if args.attempts > 1 else one_run()
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
