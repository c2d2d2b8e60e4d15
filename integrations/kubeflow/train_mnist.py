"""MNIST with data-parallel training (DDP) and the zeus-bso Lightning callback.

Each run is one recurrence of the job: the server picks the batch size, every rank trains with
it, rank 0 reports the validation accuracy with the energy of all ranks after each epoch, and
every rank stops when the server says so.

In a Kubeflow PyTorchJob (pytorchjob.yaml) each pod is one node with one GPU; the operator sets
MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, which Lightning reads:

    python train_mnist.py --num-nodes 2 --devices 1 --server http://zeus-bso:8000

On one machine, two CPU processes through torchrun (gloo), on synthetic MNIST-shaped data:

    torchrun --nproc-per-node 2 train_mnist.py --accelerator cpu --devices 2 --data synthetic

The token comes from ZEUS_BSO_TOKEN. Needs ``pip install 'zeus-bso[lightning]'`` (plus
``nvml`` on NVIDIA GPUs) and, for ``--data mnist``, torchvision.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from zeus_bso import JobSpec
from zeus_bso.energy import EstimateMeter
from zeus_bso.integrations.lightning import ZeusBSOCallback

RESULT_MARKER = "ZEUS_BSO_RANK_RESULT"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--server", default=os.environ.get("ZEUS_BSO_SERVER_URL", "http://zeus-bso:8000")
    )
    parser.add_argument("--job-id", default="mnist-ddp", help="fixed across recurrences")
    parser.add_argument("--batch-sizes", default="32,64,128,256")
    parser.add_argument("--default-batch-size", type=int, default=64)
    parser.add_argument("--target-accuracy", type=float, default=0.97)
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1, help="processes (GPUs) per node")
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--data", choices=["mnist", "synthetic"], default="mnist")
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "mnist"))
    parser.add_argument(
        "--estimate-watts",
        type=float,
        default=None,
        help="no energy counter here (CPU): estimate each rank's energy as time x watts",
    )
    return parser


def synthetic_mnist(n: int, seed: int) -> TensorDataset:
    """MNIST-shaped data a small CNN learns in an epoch or two: each class lights its own
    4x4 patch of a noisy 28x28 image."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, 28, 28, generator=g)
    for c in range(10):
        row, col = 2 + 6 * (c // 4), 2 + 6 * (c % 4)
        images[labels == c, 0, row : row + 4, col : col + 4] += 1.0
    return TensorDataset(images, labels)


def mnist(data_dir: str, train: bool) -> Dataset[Any]:
    from torchvision import datasets, transforms  # only the real data needs it

    normalise = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )
    return datasets.MNIST(data_dir, train=train, download=True, transform=normalise)


class MNISTClassifier(pl.LightningModule):
    """A small CNN. ``batch_size`` is the attribute the callback sets and the loader reads."""

    def __init__(self, data: str, data_dir: str, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.data, self.data_dir = data, data_dir
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
        )  # fmt: skip

    def _dataset(self, train: bool) -> Dataset[Any]:
        if self.data == "synthetic":
            return synthetic_mnist(4096 if train else 1024, seed=0 if train else 1)
        return mnist(self.data_dir, train)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._dataset(True), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._dataset(False), batch_size=256)

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def validation_step(self, batch: Any, _: int) -> None:
        images, labels = batch
        accuracy = (self.net(images).argmax(1) == labels).float().mean()
        self.log("val_acc", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    job = JobSpec(
        job_id=args.job_id,
        job_id_prefix=args.job_id.split("-")[0],
        batch_sizes=batch_sizes,
        default_batch_size=args.default_batch_size,
        target_metric=args.target_accuracy,
        max_epochs=args.max_epochs,
    )
    meter = EstimateMeter(args.estimate_watts) if args.estimate_watts else None
    callback = ZeusBSOCallback(
        args.server,
        job,
        monitor="val_acc",
        energy_meter=meter,
        token=os.environ.get("ZEUS_BSO_TOKEN"),
    )
    model = MNISTClassifier(args.data, args.data_dir, batch_size=args.default_batch_size)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy="ddp",
        max_epochs=args.max_epochs,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(prefix="mnist-"),
    )
    trainer.fit(model)
    result = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "batch_size": model.batch_size,
        "epochs": trainer.current_epoch,
        "trial_number": callback.trial_number,
    }
    # One write of the whole line: the ranks share torchrun's stdout, and a line printed in
    # pieces can be split by another rank's (a soak round beside a CPU hog saw it).
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), f"{RESULT_MARKER} {json.dumps(result)}\n".encode())


if __name__ == "__main__":
    main()
