"""Lightning as most of its tutorials write it: the DataLoaders built in the script at a size
of its own and given to ``trainer.fit(model, train_loader, val_loader)``; the module knows no
batch size; a linear warm-up then decay sized from ``trainer.estimated_stepping_batches``.

    python lightning_fit_loaders.py --job NAME [--target 0.9] [--oom-above N]
        [--save-to DIR] [--resume-from CKPT] [--kill-at-epoch N] [--workers N]
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


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 0] + 0.5 * x[:, 1] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(self, lr: float = 0.2, oom_above: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        out_of_memory_above(self.hparams.oom_above, x)
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        total = self.trainer.estimated_stepping_batches
        warmup = max(1, total // 10)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: min((step + 1) / warmup, max(0.0, (total - step) / (total - warmup))),
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
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    pl.seed_everything(0, verbose=False)
    train_loader = DataLoader(
        dataset(96, 0),
        batch_size=16,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    val_loader = DataLoader(dataset(64, 1), batch_size=64)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
    callbacks: list[pl.Callback] = [callback, KillAtEpoch(args.kill_at_epoch)]
    if args.save_to:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.save_to, save_last=True))
    trainer = pl.Trainer(
        max_epochs=job.max_epochs,
        callbacks=callbacks,
        accelerator=ACCELERATOR,
        precision=PRECISION,
        logger=False,
        enable_checkpointing=bool(args.save_to),
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Classifier(oom_above=args.oom_above)
    trainer.fit(model, train_loader, val_loader, ckpt_path=args.resume_from)
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
