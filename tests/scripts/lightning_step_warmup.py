"""Lightning with the warm-up its docs write in ``optimizer_step`` (no scheduler: the rate set
on the param groups by hand after each step, from ``trainer.global_step``), and the gradients
clipped by the Trainer (``gradient_clip_val``).

    python lightning_step_warmup.py --job NAME [--target 0.9] [--oom-above N]
        [--save-to DIR] [--resume-from CKPT] [--kill-at-epoch N]
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import out_of_memory_above
from tests.scripts.hardware import ACCELERATOR, PRECISION
from tests.scripts.lightning_faults import KillAtEpoch
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback

WARMUP_STEPS = 8


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 1] - x[:, 4] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 16, learning_rate: float = 0.2, oom_above: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(dataset(96, 0), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(dataset(64, 1), batch_size=32)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out_of_memory_above(self.hparams.oom_above, x)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        optimizer.step(closure=optimizer_closure)
        # manually warm up lr without a scheduler
        if self.trainer.global_step < WARMUP_STEPS:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / WARMUP_STEPS)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.hparams.learning_rate


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
        max_epochs=4,
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
    callbacks: list[pl.Callback] = [callback, KillAtEpoch(args.kill_at_epoch)]
    if args.save_to:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.save_to, save_last=True))
    trainer = pl.Trainer(
        max_epochs=job.max_epochs,
        callbacks=callbacks,
        accelerator=ACCELERATOR,
        precision=PRECISION,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=bool(args.save_to),
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(oom_above=args.oom_above), ckpt_path=args.resume_from)
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
