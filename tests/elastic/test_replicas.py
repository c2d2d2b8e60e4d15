"""ElasticBatchSize with several replicas: the noise from DDP replicas' gradients (gloo, two CPU
processes) against a problem whose noise is known in closed form, one decision on every rank,
and Lightning's DDP strategy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="ElasticBatchSize's torch side needs torch")
mp = pytest.importorskip("torch.multiprocessing")

from tests.elastic.replica_bodies import (  # noqa: E402
    DELTA,
    SIGMA,
    D,
    both,
    run_rank,
)
from tests.preloaded_python import spawning  # noqa: E402
from zeus_bso.elastic import ElasticBatchSize  # noqa: E402


@pytest.fixture(scope="module")
def replica_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each rank of one two-process gloo group returned from `both` bodies."""
    out = tmp_path_factory.mktemp("replicas")
    with spawning():
        mp.spawn(run_rank, args=(both, 2, str(out / "store"), str(out)), nprocs=2)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.timeout(180)
def test_replicas_recover_the_closed_form_noise_and_agree(
    replica_runs: list[dict[str, Any]],
) -> None:
    # Per-sample gradient (x.delta - eps) x:
    # |G|^2 = |delta|^2, tr(S) = d (|delta|^2 + sigma^2) + |delta|^2.
    ranks = [run["least_squares"] for run in replica_runs]
    sqr_true = sum(v * v for v in DELTA)
    var_true = D * (sqr_true + SIGMA**2) + sqr_true
    assert ranks[0]["sqr"] == ranks[1]["sqr"]  # one estimate, the same on both ranks
    assert ranks[0]["var"] == ranks[1]["var"]
    assert ranks[0]["sqr"] == pytest.approx(sqr_true, rel=0.2)
    assert ranks[0]["var"] == pytest.approx(var_true, rel=0.15)
    assert ranks[0]["choice"] == ranks[1]["choice"]  # rank 0's decision on both
    assert ranks[0]["choice"][2] == 2


@pytest.mark.timeout(180)
def test_without_no_sync_every_micro_batch_is_all_reduced_and_nothing_is_measured(
    replica_runs: list[dict[str, Any]],
) -> None:
    for run in replica_runs:
        assert run["unsynced"]["var"] is None


def test_attach_with_a_ddp_model_needs_a_process_group() -> None:
    from zeus_bso.errors import ZeusBSOError

    ebs = ElasticBatchSize(16)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ZeusBSOError, match=r"torch\.distributed"):
        ebs.attach(optimizer, ddp_model=object())


try:  # the Lightning test's module, defined at module level as a script defines it
    from lightning.pytorch import LightningModule as _LightningModule
except ImportError:  # pragma: no cover - the test skips
    _LightningModule = object


class Regressor(_LightningModule):  # type: ignore[misc]
    """Writes each rank's batch size per epoch and final noise estimate to files."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.batch_size = 1
        self.out = out
        self.layer = torch.nn.Linear(8, 1)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2048, 8, generator=g)
        y = x @ torch.randn(8, 1, generator=g) + 0.5 * torch.randn(2048, 1, generator=g)
        self.data = torch.utils.data.TensorDataset(x, y)

    def train_dataloader(self) -> Any:
        line = [self.batch_size, self.trainer.accumulate_grad_batches]
        with open(Path(self.out, f"epochs{self.global_rank}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        return torch.utils.data.DataLoader(self.data, batch_size=self.batch_size)

    def training_step(self, batch: Any, _: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_end(self) -> None:
        ebs = next(c.elastic for c in self.trainer.callbacks if hasattr(c, "elastic"))
        state = {"var": ebs.noise.var, "sqr": ebs.noise.sqr, "replicas": ebs.replicas}
        Path(self.out, f"noise{self.global_rank}.json").write_text(json.dumps(state))


@pytest.mark.timeout(180)
def test_lightning_ddp_two_processes_one_decision_per_epoch(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")

    from tests.integrations.lightning_models import quiet_trainer_options
    from zeus_bso.elastic.lightning import ElasticBatchSizeCallback

    def elastic() -> ElasticBatchSize:
        return ElasticBatchSize(
            32, max_batch_size=1024, local_bsz_bounds=(8, 256), min_accumulation=1
        )

    saved = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "saved", save_last=True)
    trainer = pl.Trainer(
        max_epochs=4,
        devices=2,
        strategy="ddp_fork",  # ranks forked from this process, which has imported Lightning
        callbacks=[ElasticBatchSizeCallback(elastic()), saved],
        reload_dataloaders_every_n_epochs=1,
        **(quiet_trainer_options(tmp_path) | {"enable_checkpointing": True}),
    )
    trainer.fit(Regressor(str(tmp_path)))
    epochs = [
        [json.loads(line) for line in (tmp_path / f"epochs{r}.jsonl").read_text().splitlines()]
        for r in range(2)
    ]
    assert epochs[0] == epochs[1]  # the same batch size and accumulation on both ranks
    assert epochs[0][0] == [16, 1]  # the initial 32, 16 per rank
    noise = [json.loads((tmp_path / f"noise{r}.json").read_text()) for r in range(2)]
    assert noise[0] == noise[1]
    assert noise[0]["replicas"] == 2
    assert noise[0]["var"] is not None
    assert math.isfinite(noise[0]["var"])
    assert noise[0]["var"] > 0

    # Resumed on one process, as an elastic scheduler may: the checkpoint's global batch, all on
    # this process (its spread over two would train half of it at its whole scale's rate).
    checkpoint = tmp_path / "saved" / "last.ckpt"
    state = torch.load(checkpoint, weights_only=False)["callbacks"]["ElasticBatchSizeCallback"]
    local, accumulation, replicas = state["choice"]
    assert replicas == 2
    resumed = Path(tmp_path / "resumed")
    resumed.mkdir()
    ebs = elastic()
    pl.Trainer(
        max_epochs=5,
        callbacks=[ElasticBatchSizeCallback(ebs)],
        reload_dataloaders_every_n_epochs=1,
        **quiet_trainer_options(tmp_path),
    ).fit(Regressor(str(resumed)), ckpt_path=checkpoint)
    lines = (resumed / "epochs0.jsonl").read_text().splitlines()
    size, steps = json.loads(lines[0])  # the DataLoader the resumed epoch trains
    assert size * steps == local * accumulation * 2
    assert size <= 256


@pytest.mark.timeout(180)
def test_lightning_ddp_spawn_hands_the_callback_to_its_processes(tmp_path: Path) -> None:
    # ddp_spawn pickles the Trainer's callbacks for the processes it starts: the elastic's
    # record of the optimizers it wrapped could not be pickled, and the fit failed to start.
    pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")

    from tests.integrations.lightning_models import quiet_trainer_options
    from zeus_bso.elastic.lightning import ElasticBatchSizeCallback

    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(8, 256), min_accumulation=1)
    trainer = pl.Trainer(
        max_epochs=2,
        devices=2,
        strategy="ddp_spawn",
        callbacks=[ElasticBatchSizeCallback(ebs)],
        reload_dataloaders_every_n_epochs=1,
        **quiet_trainer_options(tmp_path),
    )
    with spawning():
        trainer.fit(Regressor(str(tmp_path)))
    epochs = [
        [json.loads(line) for line in (tmp_path / f"epochs{r}.jsonl").read_text().splitlines()]
        for r in range(2)
    ]
    assert epochs[0] == epochs[1]  # one decision, on both ranks
    assert epochs[0][0] == [16, 1]  # the initial 32, 16 per rank
    noise = [json.loads((tmp_path / f"noise{r}.json").read_text()) for r in range(2)]
    assert noise[0]["replicas"] == 2
    assert noise[0]["var"] is not None  # measured through the DDP hook in each process
