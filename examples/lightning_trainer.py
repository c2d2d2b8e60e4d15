"""A Lightning Trainer with ZeusBSOCallback, recurrence after recurrence. CPU-only, on data it
generates.

    zeus-bso-server serve                      # in another terminal: 'zeus-bso[server]'
    pip install torch 'zeus-bso[lightning]'    # where it trains (a CPU torch will do)
    python examples/lightning_trainer.py --recurrences 5
"""

from __future__ import annotations

import sys

import lightning.pytorch as pl
import torch
from _common import arguments, recurrences

from zeus_bso import JobSpec, RunOutcome
from zeus_bso.integrations.lightning import ZeusBSOCallback


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size  # ZeusBSOCallback sets it before the DataLoader is built
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
        )
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2560, 16, generator=g)
        y = (x[:, :4].sum(dim=1) > 0).long()
        self.train_set = torch.utils.data.TensorDataset(x[:2048], y[:2048])
        self.val_set = torch.utils.data.TensorDataset(x[2048:], y[2048:])

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.val_set, batch_size=256)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Tuned at the default batch size (32); the callback's linear rule scales it.
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    args = arguments(__doc__)
    job = JobSpec(
        job_id_prefix="example-lightning",
        batch_sizes=[8, 16, 32, 64, 128],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=15,
    )

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOCallback(
            args.server, job, monitor="val_acc", token=args.token, lr_rule="linear"
        )
        trainer = pl.Trainer(
            max_epochs=job.max_epochs,
            accelerator="cpu",
            callbacks=[callback],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Classifier())
        return callback.outcome  # its line is on the console already

    # A recurrence delivers a model: a run that stops short is followed by another, at the next
    # batch size the server gives, up to three runs; the script exits 1 if one delivered none.
    sys.exit(recurrences(one_run, args.recurrences))


if __name__ == "__main__":
    main()
