"""A Lightning Fabric training loop with a step schedule, stepped each epoch, saved and resumed
with ``fabric.save`` and ``fabric.load``, zeus-bso's session in the state they save and load
(``--forget-trial``: the trial not given to zeus-bso on resuming).

python fabric_loop.py --job NAME [--target 0.9] [--oom-above N]
    [--save-to DIR] [--resume-from CKPT [--forget-trial]] [--kill-at-epoch N [--kill-after-report]]
"""

from __future__ import annotations

import argparse
import sys

import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import kill_at_epoch, out_of_memory_above
from tests.scripts.hardware import ACCELERATOR, PRECISION
from zeus_bso import JobSpec
from zeus_bso.integrations.fabric import ZeusBSOFabric


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 4] > 0).long())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--save-to", default=None)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--forget-trial", action="store_true")
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--kill-after-report", action="store_true")
    args = parser.parse_args(argv)
    fabric = Fabric(accelerator=ACCELERATOR, devices=1, precision=PRECISION)
    fabric.launch()
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    val = dataset(64, 1)
    saved = fabric.load(args.resume_from) if args.resume_from else {}
    resume = None if args.forget_trial else saved.get("bso")
    with ZeusBSOFabric(fabric, job=job, lr_rule="linear", resume=resume) as bso:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        bso.scale(optimizer)
        model, optimizer = fabric.setup(model, optimizer)
        state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "bso": bso}
        if args.resume_from:
            fabric.load(args.resume_from, state)
        loader = fabric.setup_dataloaders(
            DataLoader(dataset(96, 0), batch_size=bso.batch_size, shuffle=True)
        )
        bso.train_begin(len(loader))
        for epoch in range(saved.get("epoch", 0), job.max_epochs):
            if not args.kill_after_report:
                kill_at_epoch(args.kill_at_epoch, epoch)
            model.train()
            for x, y in loader:
                bso.step_begin(x)  # its first batch is checked against the batch size
                out_of_memory_above(args.oom_above, x)
                optimizer.zero_grad()
                fabric.backward(torch.nn.functional.cross_entropy(model(x), y))
                optimizer.step()
            scheduler.step()
            model.eval()
            with torch.no_grad():
                x, y = (t.to(fabric.device) for t in val.tensors)
                accuracy = (model(x).argmax(1) == y).float().mean()
            stop = bso.report(float(accuracy))
            if args.kill_after_report:
                kill_at_epoch(args.kill_at_epoch, epoch)
            if args.save_to:
                checkpoint = {**state, "epoch": epoch + 1}
                fabric.save(f"{args.save_to}/last.ckpt", checkpoint)
            if stop:
                break
    return 0 if bso.converged else 1


if __name__ == "__main__":
    sys.exit(main())
