"""Lightning with a schedule driven by the metric: ReduceLROnPlateau on the validation loss,
returned as ``configure_optimizers``' dict with its ``monitor``, beside EarlyStopping on that
loss and a ModelCheckpoint that keeps the best accuracy (and the last).

    python lightning_plateau.py --job NAME [--target 0.9] [--oom-above N]
        [--save-to DIR] [--resume-from CKPT] [--kill-at-epoch N [--kill-after-report]]
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

EPOCHS = 4


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 2] + x[:, 4] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 16, lr: float = 0.1, oom_above: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(dataset(96, 0), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(dataset(64, 1), batch_size=64)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out_of_memory_above(self.hparams.oom_above, x)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        # Halves the rate after any validation whose loss is not 5% below the best so far.
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=0.5, patience=0, threshold=0.05
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--save-to", default=None)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--kill-after-report", action="store_true")
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=EPOCHS,
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
    callbacks: list[pl.Callback] = [
        callback,
        pl.callbacks.EarlyStopping(monitor="val_loss", patience=EPOCHS),
        KillAtEpoch(args.kill_at_epoch, args.kill_after_report),
    ]
    if args.save_to:
        best = pl.callbacks.ModelCheckpoint(
            dirpath=args.save_to, monitor="val_acc", mode="max", save_last=True
        )
        callbacks.append(best)
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
