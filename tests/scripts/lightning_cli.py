"""LightningCLI, configured from a YAML file that adds ZeusBSOCallback:

python lightning_cli.py fit --config lightning_cli.yaml [--model.oom_above N] [--ckpt_path CKPT]
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import out_of_memory_above


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 2] + x[:, 4] > 0).long())


class Classifier(pl.LightningModule):
    def __init__(
        self, batch_size: int = 16, lr: float = 0.1, step_size: int = 2, oom_above: int = 0
    ) -> None:
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
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=self.hparams.step_size)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def main() -> None:
    LightningCLI(Classifier, save_config_callback=None)


if __name__ == "__main__":
    main()
