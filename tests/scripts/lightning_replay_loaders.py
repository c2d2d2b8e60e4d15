"""Lightning with two train DataLoaders, as continual-learning scripts train: the new data at
the module's batch size and a replay of old data at a fixed size, returned as a dict (the fixed
one first) that Lightning combines; each step trains on both.

    python lightning_replay_loaders.py --job NAME [--target 0.9]
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.hardware import ACCELERATOR, PRECISION
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback

REPLAY = 8
"""The replayed samples of every step, whatever the batch size."""


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 4] > 0).long())


class Continual(pl.LightningModule):
    def __init__(self, batch_size: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def train_dataloader(self) -> dict[str, DataLoader]:
        return {
            "replay": DataLoader(dataset(24, 2), batch_size=REPLAY, shuffle=True),
            "new": DataLoader(dataset(96, 0), batch_size=self.hparams.batch_size, shuffle=True),
        }

    def val_dataloader(self) -> DataLoader:
        return DataLoader(dataset(64, 1), batch_size=32)

    def training_step(self, batch, batch_idx):
        x = torch.cat([batch["new"][0], batch["replay"][0]])
        y = torch.cat([batch["new"][1], batch["replay"][1]])
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
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
    trainer = pl.Trainer(
        max_epochs=job.max_epochs,
        callbacks=[callback],
        accelerator=ACCELERATOR,
        precision=PRECISION,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Continual())
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
