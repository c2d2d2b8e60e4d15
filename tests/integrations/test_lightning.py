"""ZeusBSOCallback with a real Lightning Trainer on the CPU against a real server process."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the Lightning tests need torch (pip install torch)")
pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")

from tests.conftest import ServerProcess, quiet_trainer_options, sqlite_url, unique_id  # noqa: E402
from zeus_bso import JobSpec  # noqa: E402
from zeus_bso.energy import EstimateMeter  # noqa: E402
from zeus_bso.lightning import ZeusBSOCallback  # noqa: E402
from zeus_bso.server_client import ServerClient  # noqa: E402


def make_data(n: int = 512, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return torch.utils.data.TensorDataset(x, y)


class TinyClassifier(pl.LightningModule):
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
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=target,
        max_epochs=max_epochs,
        mab_seed=1,
    )


def fit(server_url: str, spec: JobSpec, tmp_path: Path, **trainer_args: Any) -> tuple[Any, Any]:
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    callback = ZeusBSOCallback(server_url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    options: dict[str, Any] = {"max_epochs": spec.max_epochs, **quiet_trainer_options(tmp_path)}
    options.update(trainer_args)
    ckpt_path = options.pop("ckpt_path", None)
    trainer = pl.Trainer(callbacks=[callback, *options.pop("callbacks", [])], **options)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, callback


def test_recurrences_use_the_dispatched_batch_size_and_stop_when_told(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = job(unique_id("lit"), target=0.85)
    sizes = []
    for _ in range(3):
        model, callback = fit(server.url, spec, tmp_path)
        sizes.append(callback.batch_size)
        assert max(model.seen_batch_sizes) == callback.batch_size
        assert model.batch_size == callback.batch_size
        logged = model.trainer.callback_metrics  # logged through pl_module.log
        assert float(logged["bso/batch_size"]) == callback.batch_size
        assert float(logged["bso/energy_j"]) > 0
        assert float(logged["bso/cost"]) > 0
    assert sizes[0] == spec.default_batch_size
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [t["batch_size"] for t in trials] == sizes
    assert all(t["status"] == "reported" for t in trials)
    converged = [t for t in trials if t["converged"]]
    assert converged, trials
    # The server's stop ended a run as soon as it reached the target, before max_epochs.
    assert any(t["epochs"] < spec.max_epochs for t in converged), trials
    assert all(t["energy"] > 0 and t["time"] > 0 for t in trials)


def test_a_resumed_fit_continues_its_trial(server: ServerProcess, tmp_path: Path) -> None:
    spec = job(unique_id("resume"), target=0.999, max_epochs=5)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    fit(
        server.url, spec, tmp_path, max_epochs=2, enable_checkpointing=True, callbacks=[checkpoints]
    )
    _, callback = fit(
        server.url,
        spec,
        tmp_path,
        max_epochs=5,
        enable_checkpointing=True,
        ckpt_path=str(tmp_path / "last.ckpt"),
    )
    assert callback.trial_number == 1
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    (trial,) = state["trials"]
    assert trial["epochs"] == 5  # epochs 1-2, then 3-5 of the same trial
    assert trial["status"] == "reported"


def test_training_survives_the_server_going_away(tmp_path: Path) -> None:
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)

    class KillServer(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 0:
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait()

    try:
        spec = job(unique_id("gone"), target=0.999, max_epochs=4)
        model, callback = fit(server.url, spec, tmp_path, callbacks=[KillServer()])
        assert len(model.seen_batch_sizes) > 0
        assert callback.batch_size == spec.default_batch_size
    finally:
        server.stop()


def test_ddp_on_two_cpu_processes(server: ServerProcess, tmp_path: Path) -> None:
    """Two ranks (gloo): one trial, the same batch size on both, energy of both added up."""
    spec = job(unique_id("ddp"), target=0.999, max_epochs=2)
    fit(server.url, spec, tmp_path, devices=2, strategy="ddp_spawn", num_nodes=1)
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    (trial,) = state["trials"]
    assert trial["batch_size"] == spec.default_batch_size
    assert trial["epochs"] == 2
    # Each rank's estimate meter reads 100 W x its own time: together about 200 W x time.
    assert trial["energy"] > 1.5 * 100 * trial["time"]
