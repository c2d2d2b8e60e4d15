"""Lightning with the batch size on a LightningDataModule, and a schedule stepped each epoch.

python lightning_datamodule.py --job NAME [--target 0.9] [--oom-above N [--oom-after STEPS]]
    [--oom-in-validation] [--max-epochs N] [--save-to DIR] [--resume-from CKPT]
    [--kill-at-epoch N [--kill-after-report]] [--attempts N]

With ``--attempts`` above 1, a recurrence runs fits until one delivers a model
(`zeus_bso.until_converged`).
"""

from __future__ import annotations

import argparse
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import OutOfMemoryLater, out_of_memory_above
from tests.scripts.hardware import ACCELERATOR, PRECISION
from tests.scripts.lightning_faults import KillAtEpoch
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.lightning import ZeusBSOCallback


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(160, 7, generator=g)
        data = TensorDataset(x, (x[:, 1] + x[:, 3] > 0).long())
        self.train_set, self.val_set = torch.utils.data.random_split(
            data, [96, 64], generator=torch.Generator().manual_seed(1)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Classifier(pl.LightningModule):
    def __init__(
        self,
        lr: float = 0.1,
        oom_above: int = 0,
        oom_after: int = 0,
        oom_in_validation: bool = False,
    ) -> None:
        super().__init__()
        self.lr = lr
        self.oom_in_validation = oom_in_validation
        self.out_of_memory = OutOfMemoryLater(oom_above, oom_after)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.out_of_memory(x)
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        if self.oom_in_validation and not self.trainer.sanity_checking:
            out_of_memory_above(1, x)  # its evaluation's batch: what it gathers, its own size
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return [optimizer], [torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--save-to", default=None)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--oom-after", type=int, default=0)
    parser.add_argument("--oom-in-validation", action="store_true", help="after the sanity check")
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--kill-after-report", action="store_true")
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )

    def one_run() -> RunOutcome | None:
        pl.seed_everything(0, verbose=False)
        callback = ZeusBSOCallback(job=job, monitor="val_acc", lr_rule="linear")
        callbacks: list[pl.Callback] = [
            callback,
            KillAtEpoch(args.kill_at_epoch, args.kill_after_report),
        ]
        if args.save_to:
            callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.save_to, save_last=True))
        trainer = pl.Trainer(
            max_epochs=args.max_epochs,
            callbacks=callbacks,
            accelerator=ACCELERATOR,
            precision=PRECISION,
            logger=False,
            enable_checkpointing=bool(args.save_to),
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        model = Classifier(0.1, args.oom_above, args.oom_after, args.oom_in_validation)
        trainer.fit(model, datamodule=Data(), ckpt_path=args.resume_from)
        return callback.outcome

    outcome = until_converged(one_run, attempts=args.attempts) if args.attempts > 1 else one_run()
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
