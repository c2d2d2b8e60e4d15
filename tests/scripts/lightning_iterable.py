"""Lightning on a stream (an ``IterableDataset`` without a length, as a dataset too large to
hold is read): no epochs, so the fit validates every ``val_check_interval`` batches across the
stream (``check_val_every_n_epoch=None``) and is bounded by ``max_steps``, as Lightning's docs
set it up; each validation is one of the job's epochs.

    python lightning_iterable.py --job NAME [--target 0.9]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from tests.scripts.hardware import ACCELERATOR, PRECISION
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback


class Stream(IterableDataset):
    """Points read one at a time, without end: their label is whether x0 + x3 > 0."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        while True:
            x = torch.randn(7, generator=g)
            yield x, (x[0] + x[3] > 0).long()


def held_out(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 0] + x[:, 3] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Stream(), batch_size=self.hparams.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(held_out(64), batch_size=64)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

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
        max_epochs=4,  # validations
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
    trainer = pl.Trainer(
        max_steps=16,  # 4 validations of 4 batches of 16 samples: as many at every size
        val_check_interval=4,  # batches of 16 samples, the job's default
        check_val_every_n_epoch=None,
        callbacks=[callback],
        accelerator=ACCELERATOR,
        precision=PRECISION,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier())
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
