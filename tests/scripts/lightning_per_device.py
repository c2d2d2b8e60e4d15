"""Lightning with the datamodule of the lightning-hydra-template: the global batch size in its
hparams, divided among the processes in its ``setup()`` (``batch_size_per_device``), which
Lightning runs before any callback's, and the DataLoaders built from that.

    python lightning_per_device.py --job NAME [--target 0.9] [--batch-arg-name NAME]
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


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train: TensorDataset | None = None
        self.batch_size_per_device = batch_size

    def setup(self, stage: str | None = None) -> None:
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError("batch_size is not divisible by the number of devices")
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size
        if self.data_train is None:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(160, 7, generator=g)
            data = TensorDataset(x, (x[:, 2] - x[:, 5] > 0).long())
            self.data_train, self.data_val = torch.utils.data.random_split(
                data, [96, 64], generator=torch.Generator().manual_seed(1)
            )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data_train, batch_size=self.batch_size_per_device, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, batch_size=self.batch_size_per_device)


class Classifier(pl.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
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
    parser.add_argument("--batch-arg-name", default="batch_size")
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(
        job=job, monitor="val_acc", lr_rule="linear", batch_arg_name=args.batch_arg_name
    )
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
    trainer.fit(Classifier(), datamodule=Data())
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
