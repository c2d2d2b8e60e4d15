"""ElasticBatchSize with several replicas: the noise from DDP replicas' gradients (gloo, two CPU
processes) against a problem whose noise is known in closed form, one decision on every rank,
and Lightning's DDP strategy."""

from __future__ import annotations

import datetime
import faulthandler
import gc
import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="ElasticBatchSize's torch side needs torch")
mp = pytest.importorskip("torch.multiprocessing")

from tests.helpers import quiet_trainer_options  # noqa: E402
from zeus_bso.elastic import ElasticBatchSize  # noqa: E402

D, SIGMA, LOCAL_BATCH, STEPS = 5, 1.0, 8, 2500
DELTA = [0.3, -0.2, 0.1, 0.0, 0.4]


def _init(rank: int, world: int, store: str) -> Any:
    # A stuck collective fails after a minute with its stack, instead of hanging the suite.
    faulthandler.dump_traceback_later(90, exit=True)
    dist = torch.distributed
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    return dist


def _rank(rank: int, body: Any, world: int, store: str, out: str) -> None:
    """Run ``body(rank, world)`` in a process group and write what it returns to a file.

    The DDP model, its communication hook and the optimizer live only inside ``body``, so they
    are freed while the group is still alive. Freed after ``destroy_process_group``, the last
    reference to the Gloo group goes with the DDP reducer, whose destructor waits for Gloo's
    worker threads while holding the GIL; a worker that still has a Python callback to drop
    needs the GIL, and the rank hangs on exit (seen once in CI).
    """
    dist = _init(rank, world, store)
    try:
        result = body(rank, world)
        gc.collect()
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _least_squares(rank: int, world: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(100 + rank)  # each replica its own samples
    w_star = torch.zeros(D, 1)
    model = torch.nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([DELTA]))  # w = w* + delta, held still (lr 0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.0)
    ebs = ElasticBatchSize(
        LOCAL_BATCH * world, min_accumulation=1, smoothing=0.998, max_batch_size=1024
    )
    ebs.attach(optimizer, ddp_model=ddp)
    assert ebs.choice.local_bsz == LOCAL_BATCH
    assert ebs.replicas == world
    for _ in range(STEPS):
        x = torch.randn(LOCAL_BATCH, D, generator=g)
        y = x @ w_star + SIGMA * torch.randn(LOCAL_BATCH, 1, generator=g)
        loss = 0.5 * (ddp(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    # Each rank measured a different speed, so each would choose differently on its own.
    for local, seconds in ((8, 0.001 * (1 + rank)), (16, 0.0012 * (1 + 3 * rank))):
        for _ in range(3):
            ebs.throughput.observe(local, seconds)
    choice = ebs.get_local_bsz()
    return {
        "sqr": ebs.noise.sqr,
        "var": ebs.noise.var,
        "choice": [choice, ebs.accumulation_steps, ebs.replicas],
    }


@pytest.mark.timeout(180)
def test_replicas_recover_the_closed_form_noise_and_agree(tmp_path: Path) -> None:
    # Per-sample gradient (x.delta - eps) x:
    # |G|^2 = |delta|^2, tr(S) = d (|delta|^2 + sigma^2) + |delta|^2.
    mp.spawn(_rank, args=(_least_squares, 2, str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    sqr_true = sum(v * v for v in DELTA)
    var_true = D * (sqr_true + SIGMA**2) + sqr_true
    assert ranks[0]["sqr"] == ranks[1]["sqr"]  # one estimate, the same on both ranks
    assert ranks[0]["var"] == ranks[1]["var"]
    assert ranks[0]["sqr"] == pytest.approx(sqr_true, rel=0.2)
    assert ranks[0]["var"] == pytest.approx(var_true, rel=0.15)
    assert ranks[0]["choice"] == ranks[1]["choice"]  # rank 0's decision on both
    assert ranks[0]["choice"][2] == 2


@pytest.mark.timeout(120)
def test_without_no_sync_every_micro_batch_is_all_reduced_and_nothing_is_measured(
    tmp_path: Path,
) -> None:
    mp.spawn(_rank, args=(_unsynced, 2, str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    for r in range(2):
        assert json.loads((tmp_path / f"rank{r}.json").read_text())["var"] is None


def _unsynced(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(rank)
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ebs = ElasticBatchSize(16, min_accumulation=2)
    ebs.attach(optimizer, ddp_model=ddp)
    for _ in range(5):
        for _ in range(ebs.accumulation_steps):  # no ddp.no_sync(): each backward syncs
            ddp(torch.randn(4, 4)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return {"var": ebs.noise.var}


def test_attach_with_a_ddp_model_needs_a_process_group() -> None:
    from zeus_bso.errors import ZeusBSOError

    ebs = ElasticBatchSize(16)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ZeusBSOError, match=r"torch\.distributed"):
        ebs.attach(optimizer, ddp_model=object())


try:  # the Lightning test's module must be picklable for ddp_spawn: defined at module level
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
    from zeus_bso.elastic.lightning import ElasticBatchSizeCallback

    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(8, 256), min_accumulation=1)
    trainer = pl.Trainer(
        max_epochs=4,
        devices=2,
        strategy="ddp_spawn",
        callbacks=[ElasticBatchSizeCallback(ebs)],
        reload_dataloaders_every_n_epochs=1,
        **quiet_trainer_options(tmp_path),
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
