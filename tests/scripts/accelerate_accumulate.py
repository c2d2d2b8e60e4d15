"""An Accelerate loop as the Transformers "no trainer" examples write it: gradient accumulation
(micro-batches of at most 8 samples, the accelerator's ``gradient_accumulation_steps`` set by
zeus-bso) with each step under ``accelerator.accumulate(model)``, and transformers'
``get_scheduler`` (cosine, with warm-up) sized in optimizer steps from the prepared DataLoader
and prepared too, so that it steps only when the optimizer does.

    python accelerate_accumulate.py --job NAME [--target 0.9]
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_scheduler

from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec
from zeus_bso.integrations.accelerate import ZeusBSOAccelerate


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 1] + x[:, 4] > 0).long())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    args = parser.parse_args(argv)
    accelerator = Accelerator(cpu=ON_CPU, mixed_precision="bf16" if BF16 else "no")
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    with ZeusBSOAccelerate(accelerator, job=job, lr_rule="linear", max_micro_batch_size=8) as bso:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        bso.scale(optimizer)
        loader = DataLoader(dataset(128, 0), batch_size=bso.micro_batch_size, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        steps_per_epoch = math.ceil(len(loader) / accelerator.gradient_accumulation_steps)
        scheduler = get_scheduler(
            "cosine",
            optimizer,
            num_warmup_steps=bso.warmup_steps(2),
            num_training_steps=steps_per_epoch * job.max_epochs,
        )
        scheduler = accelerator.prepare(scheduler)
        bso.train_begin(len(loader))
        val = dataset(64, 1)
        for _ in range(job.max_epochs):
            model.train()
            for x, y in loader:
                with accelerator.accumulate(model):
                    bso.step_begin(x)  # its first micro-batch is checked against the size
                    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
            model.eval()
            with torch.no_grad():
                x, y = (t.to(accelerator.device) for t in val.tensors)
                accuracy = (model(x).argmax(1) == y).float().mean()
            if bso.report(float(accuracy)):
                break
    return 0 if bso.converged else 1


if __name__ == "__main__":
    sys.exit(main())
