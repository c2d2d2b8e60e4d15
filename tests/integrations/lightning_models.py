"""The tests' Lightning modules, their jobs and the trainer's options, apart from the test modules:
the training processes of the multi-process tests import them in an environment with torch and
``zeus-bso[lightning]`` alone (`tests.environments`), where neither pytest nor the server is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from tests.integrations.paced_jobs import PACED_BATCH, PACED_STEPS, paced_step
from zeus_bso import JobSpec
from zeus_bso.energy import EstimateMeter
from zeus_bso.integrations.lightning import ZeusBSOCallback


def quiet_trainer_options(root: Path | str) -> dict[str, Any]:
    """Lightning ``Trainer`` options of the tests: on the CPU, nothing logged, saved or shown."""
    return {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root,
    }


def make_data(n: int = 512, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return torch.utils.data.TensorDataset(x, y)


class TinyClassifier(pl.LightningModule):  # type: ignore[misc]
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.layer = torch.nn.Linear(8, 2)
        self.seen_batch_sizes: list[int] = []
        self.train_data, self.val_data = make_data(512, 0), make_data(256, 1)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(
            self.train_data, batch_size=self.batch_size, shuffle=True
        )

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.val_data, batch_size=64)

    def training_step(self, batch: Any, _: int) -> Any:
        x, y = batch
        self.seen_batch_sizes.append(len(x))
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: Any, _: int) -> None:
        x, y = batch
        self.log("val_acc", (self.layer(x).argmax(1) == y).float().mean(), prog_bar=False)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def job(job_id: str, target: float = 0.9, max_epochs: int = 6) -> JobSpec:
    """`TinyClassifier`'s job: three batch sizes, the middle one the default."""
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=target,
        max_epochs=max_epochs,
        mab_seed=1,
        # CPU epochs of a tiny model: their costs are timing noise, which the learning-curve
        # stop would extrapolate (it is tested in tests/policy and tests/api).
        learning_curve_stop=False,
    )


def fit(
    server_url: str, spec: JobSpec, tmp_path: Path, *, given: bool = False, **trainer_args: Any
) -> tuple[Any, Any]:
    """A fit of `TinyClassifier` under the callback (an estimated 100 W); the model and the
    callback. ``given``: ``trainer.fit`` is given the DataLoaders, the train one built at 16."""
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    loaders = (
        (torch.utils.data.DataLoader(model.train_data, batch_size=16), model.val_dataloader())
        if given
        else ()
    )
    callback = ZeusBSOCallback(server_url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    options: dict[str, Any] = {"max_epochs": spec.max_epochs, **quiet_trainer_options(tmp_path)}
    options.update(trainer_args)
    ckpt_path = options.pop("ckpt_path", None)
    trainer = pl.Trainer(callbacks=[callback, *options.pop("callbacks", [])], **options)
    trainer.fit(model, *loaders, ckpt_path=ckpt_path)
    return model, callback


class Paced(pl.LightningModule):  # type: ignore[misc]
    """A linear model whose every training step takes the double GPU's time at its limit
    (`paced_step`); ``then(step)`` runs after each step (a test's interruption)."""

    def __init__(self, then: Any = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.batch_size = PACED_BATCH
        self.then = then
        self.steps = 0

    def train_dataloader(self) -> Any:
        n = PACED_STEPS * PACED_BATCH
        data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.zeros(n, dtype=torch.long))
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)

    def val_dataloader(self) -> Any:
        data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.zeros(16, dtype=torch.long))
        return torch.utils.data.DataLoader(data, batch_size=16)

    def training_step(self, batch: Any, index: int) -> Any:
        paced_step()
        self.steps += 1
        if self.then is not None:
            self.then(self.steps)
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: Any, index: int) -> None:
        self.log("val_acc", 1.0)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)
