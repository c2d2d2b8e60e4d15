"""Lightning with manual optimization, as GANs and other multi-optimizer models are written: two
optimizers, each stepped by hand in ``training_step`` after its own forward pass, and their
schedules, sized from ``trainer.estimated_stepping_batches``, stepped by hand every batch.

    python lightning_manual_optimization.py --job NAME [--target 0.9]
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.optim.lr_scheduler import LinearLR
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.hardware import ACCELERATOR, PRECISION
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback

EPOCHS = 4


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 1] - x[:, 4] > 0).long())


class TwoOptimizers(pl.LightningModule):
    """The body and the head each have their optimizer; each step takes its own forward."""

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.body = torch.nn.Linear(7, 16)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(dataset(96, 0), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(dataset(64, 1), batch_size=32)

    def training_step(self, batch, batch_idx):
        x, y = batch
        for optimizer in self.optimizers():
            loss = torch.nn.functional.cross_entropy(self(x), y)
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        for scheduler in self.lr_schedulers():
            scheduler.step()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        body = torch.optim.SGD(self.body.parameters(), lr=0.1)
        head = torch.optim.SGD(self.head.parameters(), lr=0.05)
        steps = int(self.trainer.estimated_stepping_batches)
        return [body, head], [
            LinearLR(body, start_factor=1.0, end_factor=0.1, total_iters=steps),
            LinearLR(head, start_factor=1.0, end_factor=0.1, total_iters=steps),
        ]


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
        max_epochs=EPOCHS,
    )
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        callbacks=[callback],
        accelerator=ACCELERATOR,
        precision=PRECISION,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TwoOptimizers())
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
