"""Lightning with the most common warm-up: a LinearLR warm-up chained to cosine decay by
SequentialLR, stepped every batch, its length from ``len(self.train_dataloader())``.

    python lightning_warmup_cosine.py --job NAME [--target 0.9] [--oom-above N]
        [--save-to DIR] [--resume-from CKPT] [--kill-at-epoch N]
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import out_of_memory_above
from tests.scripts.hardware import ACCELERATOR, PRECISION
from tests.scripts.lightning_faults import KillAtEpoch
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback

EPOCHS = 4


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 0] - x[:, 2] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 16, lr: float = 0.1, oom_above: int = 0) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.lr = lr
        self.oom_above = oom_above
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(dataset(96, 0), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(dataset(64, 1), batch_size=32)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out_of_memory_above(self.oom_above, x)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        total = len(self.train_dataloader()) * EPOCHS
        warmup = max(1, total // 5)
        scheduler = SequentialLR(
            optimizer,
            schedulers=[
                LinearLR(optimizer, start_factor=0.1, total_iters=warmup),
                CosineAnnealingLR(optimizer, T_max=total - warmup),
            ],
            milestones=[warmup],
        )
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--save-to", default=None)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=EPOCHS,
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="auto")
    callbacks: list[pl.Callback] = [callback, KillAtEpoch(args.kill_at_epoch)]
    if args.save_to:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.save_to, save_last=True))
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        callbacks=callbacks,
        accelerator=ACCELERATOR,
        precision=PRECISION,
        logger=False,
        enable_checkpointing=bool(args.save_to),
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(oom_above=args.oom_above), ckpt_path=args.resume_from)
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
