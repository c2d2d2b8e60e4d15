"""A Lightning Trainer whose batch size grows within the run (ElasticBatchSizeCallback, after
AdaptDL): no server, on the CPU, on data it generates. Each epoch's batch size, gain and
gradient noise scale go to the Trainer's loggers (a CSV file here) and are printed.

    pip install torch 'zeus-bso[lightning]'    # a CPU torch will do
    python examples/elastic_lightning.py --epochs 8
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import lightning.pytorch as pl
import torch
from _common import arguments, data

from zeus_bso.elastic import ElasticBatchSize, ElasticBatchSizeCallback


class Classifier(pl.LightningModule):
    def __init__(self, batch_size: int = 32, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()  # the callback sets hparams.batch_size at each epoch
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)
        )
        self.train_set, self.val_set = data(8192, seed=0), data(1024, seed=1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            self.train_set, batch_size=self.hparams.batch_size, shuffle=True
        )

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.val_set, batch_size=512)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> dict[str, object]:
        # Tuned at the initial batch size; the elastic scales the rate as the batch grows, and
        # steps this schedule by what each larger step is worth, so it ends with the training.
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, self.hparams.lr, total_steps=int(self.trainer.estimated_stepping_batches)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def main() -> None:
    args = arguments(__doc__, server=False)
    ebs = ElasticBatchSize(
        initial_batch_size=32, max_batch_size=1024, local_bsz_bounds=(16, 512), lr_rule="linear"
    )
    with tempfile.TemporaryDirectory() as logs:
        csv_logger = pl.loggers.CSVLogger(logs, name="elastic")
        trainer = pl.Trainer(
            max_epochs=args.epochs,
            accelerator="cpu",
            callbacks=[ElasticBatchSizeCallback(ebs)],
            reload_dataloaders_every_n_epochs=1,  # the DataLoader is built again at each size
            logger=csv_logger,
            log_every_n_steps=10,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Classifier())
        with open(Path(csv_logger.log_dir) / "metrics.csv") as file:
            rows = list(csv.DictReader(file))
    epochs = [row for row in rows if row.get("elastic/batch_size")]
    accuracy = [float(row["val_acc"]) for row in rows if row.get("val_acc")]
    for epoch, row in enumerate(epochs):
        noise = row.get("elastic/noise_scale") or "-"
        print(
            f"epoch {epoch}: batch size {float(row['elastic/batch_size']):.0f} "
            f"({float(row['elastic/local_batch_size']):.0f} x "
            f"{float(row['elastic/accumulation']):.0f} accumulated), gain "
            f"{float(row['elastic/gain']):.2f}, gradient noise scale {noise}"
        )
    print(f"validation accuracy {accuracy[-1]:.3f} after {len(epochs)} epochs")


if __name__ == "__main__":
    main()
