"""Lightning as its tutorial "Finetune Transformers Models with PyTorch Lightning" writes it: a
LightningDataModule of ``train_batch_size`` and ``eval_batch_size``; a module whose
hyperparameters (``save_hyperparameters()``) hold the rate, a warm-up of a fixed number of steps
and the batch sizes again (unread); transformers' ``get_linear_schedule_with_warmup`` built in
``configure_optimizers``, its length from ``self.trainer.estimated_stepping_batches``.

    python lightning_hparams_warmup.py --job NAME [--target 0.9] [--warmup-steps N]
        [--save-to DIR] [--resume-from CKPT] [--kill-at-epoch N]
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_linear_schedule_with_warmup

from tests.scripts.hardware import ACCELERATOR, PRECISION
from tests.scripts.lightning_faults import KillAtEpoch
from zeus_bso import JobSpec
from zeus_bso.integrations.lightning import ZeusBSOCallback


class GLUEDataModule(pl.LightningDataModule):
    def __init__(self, train_batch_size: int = 32, eval_batch_size: int = 32) -> None:
        super().__init__()
        self.train_batch_size = train_batch_size
        self.eval_batch_size = eval_batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(160, 7, generator=g)
        data = TensorDataset(x, (x[:, 2] - x[:, 5] > 0).long())
        self.train_set, self.val_set = torch.utils.data.random_split(
            data, [96, 64], generator=torch.Generator().manual_seed(1)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.train_batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.eval_batch_size)


class GLUETransformer(pl.LightningModule):
    def __init__(
        self,
        learning_rate: float = 0.2,
        warmup_steps: int = 0,
        train_batch_size: int = 32,
        eval_batch_size: int = 32,
    ) -> None:
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
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)
        scheduler = get_linear_schedule_with_warmup(
            optimizer,
            num_warmup_steps=self.hparams.warmup_steps,
            num_training_steps=self.trainer.estimated_stepping_batches,
        )
        scheduler = {"scheduler": scheduler, "interval": "step", "frequency": 1}
        return [optimizer], [scheduler]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--warmup-steps", type=int, default=4)
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
    pl.seed_everything(42, verbose=False)
    dm = GLUEDataModule(train_batch_size=16)
    model = GLUETransformer(warmup_steps=args.warmup_steps, train_batch_size=16)
    callback = ZeusBSOCallback(
        job=job, monitor="val_acc", lr_rule="linear", batch_arg_name="train_batch_size"
    )
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
    trainer.fit(model, datamodule=dm, ckpt_path=args.resume_from)
    return 0 if callback.outcome is not None and callback.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
