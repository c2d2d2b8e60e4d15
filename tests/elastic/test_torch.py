"""ElasticBatchSize with torch: learning rates restored around each step (schedulers keep
working), bounds respected, state across a checkpoint, and a CPU end-to-end run."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="ElasticBatchSize's torch side needs torch")

from zeus_bso.elastic import ElasticBatchSize  # noqa: E402
from zeus_bso.errors import ZeusBSOError  # noqa: E402


def regression(n: int = 4096, d: int = 8, noise: float = 0.5) -> Any:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = x @ w + noise * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def run_epochs(ebs: ElasticBatchSize, epochs: int, scheduler: bool = False) -> dict[str, Any]:
    torch.manual_seed(0)
    data = regression()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = (
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5) if scheduler else None
    )
    ebs.attach(optimizer)
    seen_lrs, local_sizes = [], []
    x_all, y_all = data.tensors
    with torch.no_grad():
        losses = [float(torch.nn.functional.mse_loss(model(x_all), y_all))]
    for _ in range(epochs):
        local = ebs.get_local_bsz()
        local_sizes.append((local, ebs.accumulation_steps))
        loader = torch.utils.data.DataLoader(data, batch_size=local, shuffle=True, drop_last=True)
        for i, (x, y) in enumerate(loader):
            with ebs.timed_microbatch(len(x)):
                loss = torch.nn.functional.mse_loss(model(x), y)
                (loss / ebs.accumulation_steps).backward()
            ebs.record_microbatch(model.parameters())
            if (i + 1) % ebs.accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
                seen_lrs.append(optimizer.param_groups[0]["lr"])
        with torch.no_grad():
            losses.append(float(torch.nn.functional.mse_loss(model(x_all), y_all)))
        if sched is not None:
            sched.step()
    return {"lrs": seen_lrs, "sizes": local_sizes, "losses": losses, "optimizer": optimizer}


def test_lr_is_restored_after_every_step_and_schedulers_work() -> None:
    ebs = ElasticBatchSize(64, max_batch_size=512, local_bsz_bounds=(16, 128))
    result = run_epochs(ebs, epochs=3, scheduler=True)
    # Between steps the group's lr is the scheduler's: 0.05, then halved each epoch.
    assert set(result["lrs"]) <= {0.05, 0.025, 0.0125}
    assert result["optimizer"].param_groups[0]["lr"] == pytest.approx(0.05 / 8)


def test_the_step_uses_the_scaled_lr() -> None:
    ebs = ElasticBatchSize(64, lr_rule="linear")
    ebs.update_scale(4.0)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    ebs.attach(optimizer)
    param.grad = torch.ones(1)
    optimizer.step()
    assert float(param) == pytest.approx(-0.1 * 4.0)  # the step saw lr x scale
    assert optimizer.param_groups[0]["lr"] == 0.1  # and the lr is back


def test_the_metrics_hold_the_rate_and_factor_the_last_step_took() -> None:
    ebs = ElasticBatchSize(64, lr_rule="sqrt")
    ebs.noise._sqr.update(1e-3)  # noisy: the gain of 4x is nearly 4
    ebs.noise._var.update(10.0)
    ebs.update_scale(4.0)
    param = torch.nn.Parameter(torch.zeros(1))
    other = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [param], "lr": 0.1}, {"params": [other], "lr": 0.5}])
    taken: list[float] = []  # the rate as the optimizer's own step sees it
    optimizer.register_step_post_hook(lambda opt, *_: taken.append(opt.param_groups[0]["lr"]))
    ebs.attach(optimizer)
    param.grad = torch.ones(1)
    optimizer.step()
    metrics = ebs.metrics()
    factor = math.sqrt(ebs.predict_gain(4.0))
    assert metrics["elastic/lr_factor"] == pytest.approx(factor)
    assert 1.9 < factor <= 2.0
    assert metrics["elastic/lr"] == pytest.approx(taken[-1]) == pytest.approx(0.1 * factor)
    assert metrics["elastic/lr"] != optimizer.param_groups[0]["lr"]  # restored after the step


def test_a_rate_given_as_a_tensor_is_logged_as_a_number() -> None:
    ebs = ElasticBatchSize(64, lr_rule="linear")
    ebs.update_scale(2.0)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([param], lr=torch.tensor(0.01))
    ebs.attach(optimizer)
    param.grad = torch.ones(1)
    optimizer.step()
    assert type(ebs.metrics()["elastic/lr"]) is float
    assert ebs.metrics()["elastic/lr"] == pytest.approx(0.02)


def test_an_optimizer_attached_twice_steps_at_the_rate_once() -> None:
    """A loop that attached its optimizer again (at each epoch, say) wrapped its step twice,
    and each step took the rule's factor twice (x16 for x4)."""
    ebs = ElasticBatchSize(64, lr_rule="linear")
    ebs.update_scale(4.0)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    assert ebs.attach(optimizer) is ebs.attach(optimizer)
    param.grad = torch.ones(1)
    optimizer.step()
    assert float(param) == pytest.approx(-0.1 * 4.0)
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_a_step_that_amps_grad_scaler_skips_leaves_the_rate_and_the_noise_finite() -> None:
    """A micro-batch whose gradients overflowed (float16's first steps) makes AMP's
    ``GradScaler`` skip its step and zero the gradients: its records reached the next step's
    noise estimate, which, with every later one, the gain and the learning rate, became NaN,
    and so did the model. Gradients zeroed without a step are not measured, and an observation
    that is not a number is left out."""
    torch.manual_seed(0)
    ebs = ElasticBatchSize(64)
    ebs.update_scale(4.0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ebs.attach(optimizer)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    rates: list[float] = []
    optimizer.register_step_pre_hook(lambda o, *_: rates.append(o.param_groups[0]["lr"]))
    for step in range(4):
        for micro in range(2):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            if step == 1 and micro == 0:
                loss = loss * float("inf")
            scaler.scale(loss / 2).backward()
            ebs.record_microbatch(model.parameters())
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    assert len(rates) == 3  # the overflowed step was skipped
    assert all(math.isfinite(rate) and rate >= 0.1 for rate in rates)
    assert ebs.noise.sqr is not None
    assert math.isfinite(ebs.noise.sqr)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


class Doubling(ElasticBatchSize):
    """Doubles the batch at each epoch after the first: the sizes do not hang on the measured
    throughput (a busy machine's), which the goodput's choice reads."""

    epochs = 0

    def get_local_bsz(self) -> int:
        self.epochs += 1
        if self.epochs > 1:
            self.update_scale(self.scale * 2)
        return self.choice.local_bsz


def train_growing(
    ebs: ElasticBatchSize, data: Any, loader: Any = None, epochs: int = 3
) -> list[int]:
    """A plain loop whose batch doubles each epoch (`Doubling`), on ``data``; the
    DataLoader built at each epoch's size, or ``loader``, built once. The micro-batches'
    sizes."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ebs.attach(optimizer)
    trained = []
    for _ in range(epochs):
        local = ebs.get_local_bsz()
        epoch_loader = loader or torch.utils.data.DataLoader(data, batch_size=local, shuffle=True)
        for i, (x, y) in enumerate(epoch_loader):
            with ebs.timed_microbatch(len(x)):
                (torch.nn.functional.mse_loss(model(x), y) / ebs.accumulation_steps).backward()
            trained.append(len(x))
            if (i + 1) % ebs.accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    return trained


def test_a_dataloader_built_once_is_refused_when_the_size_grows() -> None:
    # Built before the first epoch, it trained 16 samples a micro-batch when the elastic had
    # moved to 32: the rate was scaled, and the noise read, for a batch twice the one trained.
    ebs = Doubling(32, max_batch_size=256, local_bsz_bounds=(16, 128))
    data = regression(1000)
    once = torch.utils.data.DataLoader(data, batch_size=ebs.get_local_bsz(), shuffle=True)
    with pytest.raises(ZeusBSOError, match="a micro-batch of 16 samples, but the elastic batch"):
        train_growing(ebs, data, once)


def test_an_epochs_last_micro_batch_may_be_short() -> None:
    # 1000 samples, no multiple of 16, 32 or 64: each epoch ends on a short micro-batch.
    ebs = Doubling(32, max_batch_size=256, local_bsz_bounds=(16, 128))
    trained = train_growing(ebs, regression(1000))
    assert sum(trained) == 3 * 1000
    assert {16, 32, 64} <= set(trained)


def test_end_to_end_on_the_cpu_within_bounds_and_through_a_checkpoint() -> None:
    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 256))
    result = run_epochs(ebs, epochs=6)
    for local, accumulation in result["sizes"]:
        assert 16 <= local <= 256
        assert 32 <= local * accumulation <= 1024
    assert result["losses"][-1] < 0.5 * result["losses"][0]  # it trains
    assert ebs.noise.sqr is not None
    assert ebs.noise.var is not None
    assert ebs.progress > 0
    restored = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 256))
    restored.load_state_dict(ebs.state_dict())
    assert restored.choice == ebs.choice
    assert restored.predict_gain(4.0) == ebs.predict_gain(4.0)
    assert restored.progress == ebs.progress


def test_record_microbatch_needs_gradients() -> None:
    from zeus_bso.errors import ZeusBSOError

    ebs = ElasticBatchSize(32)
    with pytest.raises(ZeusBSOError, match="after backward"):
        ebs.record_microbatch([torch.nn.Parameter(torch.zeros(1))])


def test_lightning_callback_changes_batch_size_between_epochs(tmp_path: Any) -> None:
    pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")

    from tests.integrations.lightning_models import quiet_trainer_options
    from zeus_bso.elastic.lightning import ElasticBatchSizeCallback

    class Regressor(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 1
            self.layer = torch.nn.Linear(8, 1)
            self.data = regression()
            self.epochs: list[tuple[int, int]] = []

        def train_dataloader(self) -> Any:
            self.epochs.append((self.batch_size, self.trainer.accumulate_grad_batches))
            return torch.utils.data.DataLoader(self.data, batch_size=self.batch_size, shuffle=True)

        def training_step(self, batch: Any, _: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 256))
    model = Regressor()
    x_all, y_all = model.data.tensors
    with torch.no_grad():
        before = float(torch.nn.functional.mse_loss(model.layer(x_all), y_all))
    trainer = pl.Trainer(
        max_epochs=5,
        callbacks=[ElasticBatchSizeCallback(ebs)],
        reload_dataloaders_every_n_epochs=1,
        **quiet_trainer_options(tmp_path),
    )
    trainer.fit(model)
    assert model.epochs[0] == (16, 2)  # the initial 32 as two micro-batches of 16
    assert all(16 <= local <= 256 and 32 <= local * acc <= 1024 for local, acc in model.epochs)
    assert len(set(model.epochs)) > 1  # it measured and moved
    assert ebs.noise.var is not None
    with torch.no_grad():
        after = float(torch.nn.functional.mse_loss(model.layer(x_all), y_all))
    assert after < 0.2 * before, (before, after, model.epochs)


def test_lightning_callback_needs_dataloader_reloads(tmp_path: Any) -> None:
    pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")
    from zeus_bso.elastic.lightning import ElasticBatchSizeCallback
    from zeus_bso.errors import ZeusBSOError

    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        callbacks=[ElasticBatchSizeCallback(ElasticBatchSize(32))],
        logger=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    from lightning.pytorch.demos.boring_classes import BoringModel

    model = BoringModel()
    model.batch_size = 32
    with pytest.raises(ZeusBSOError, match="reload_dataloaders_every_n_epochs=1"):
        trainer.fit(model)


def test_a_step_given_a_closure_is_measured_after_it_runs() -> None:
    # Lightning runs the last micro-batch's forward and backward in the closure it passes to
    # step(): the step must see that micro-batch's gradient, and use the scaled lr.
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ebs = ElasticBatchSize(8, lr_rule="linear")  # two micro-batches of 4
    ebs.update_scale(2.0)
    ebs.attach(optimizer)

    def micro_batch() -> Any:
        loss = model(torch.randn(ebs.choice.local_bsz, 3)).pow(2).mean() / 2
        loss.backward()
        ebs.record_microbatch(model.parameters())
        return loss

    micro_batch()
    assert ebs.noise.var is None
    before = model.weight.detach().clone()
    optimizer.step(micro_batch)
    assert ebs.noise.var is not None  # both micro-batches of this step were measured
    assert model.weight.grad is not None
    expected = before - 0.1 * 2.0 * model.weight.grad
    assert torch.allclose(model.weight.detach(), expected)
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_a_run_of_the_optimizer_that_elastic_steps_train_is_refused_uncharged(
    sqlite_server: Any,
) -> None:
    """A plain loop that took its batch size from `BatchSizeOptimizer` and trained through an
    `ElasticBatchSize` trained at sizes the elastic one chose, while the server judged and
    charged the dispatched size. Its first report is refused, saying so, and its trial is
    released; an elastic batch size that stepped before the run (an earlier run in the same
    process) does not refuse the next one."""
    from tests.helpers import unique_id
    from zeus_bso import BatchSizeOptimizer, JobSpec
    from zeus_bso.client import ServerClient
    from zeus_bso.energy import EstimateMeter
    from zeus_bso.errors import ConfigurationError

    def job() -> JobSpec:
        return JobSpec(
            job_id=unique_id("elasticrun"), job_id_prefix="elasticrun", batch_sizes=[32, 64],
            default_batch_size=32, target_metric=0.5, max_epochs=3,
        )  # fmt: skip

    def steps(optimizer: Any, model: Any) -> None:
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    elastic = ElasticBatchSize(initial_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 64))
    elastic.attach(optimizer)
    refused = job()
    with BatchSizeOptimizer(sqlite_server.url, refused, energy_meter=EstimateMeter(100)) as bso:
        assert bso.get_batch_size() == 32
        bso.on_train_begin()
        steps(optimizer, model)
        with pytest.raises(ConfigurationError, match="ElasticBatchSize\\) took 3 of this run"):
            bso.on_evaluate(0.9)
    assert bso.outcome is not None
    assert "batch size 32 ended at epoch 1 of 3: an elastic" in bso.outcome.summary()
    assert "(not counted against 32)" in bso.outcome.summary()
    with ServerClient(sqlite_server.url) as client:
        (trial,) = client.job_state(refused.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "released")

    # The elastic batch size stepped before this run began: not this run's steps.
    plain = torch.optim.SGD(model.parameters(), lr=0.05)
    with BatchSizeOptimizer(sqlite_server.url, job(), energy_meter=EstimateMeter(100)) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        steps(plain, model)
        assert bso.on_evaluate(0.9).stop_train  # reached the target


def test_a_followed_schedule_in_a_plain_loop_ends_with_the_training() -> None:
    # The module docstring's loop: a one-cycle schedule sized in steps of the initial 32, the
    # batch doubled each epoch up to 1024, the linear rule.
    torch.manual_seed(0)
    data, epochs = regression(), 6
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 256), lr_rule="linear")
    ebs.attach(optimizer)
    total = epochs * len(data) // 32
    schedule = ebs.follow(torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=total))
    sizes, steps = [], 0
    for epoch in range(epochs):
        if epoch:  # doubled each epoch, not as the measured throughput (a busy machine's) says
            ebs.update_scale(ebs.scale * 2)
        loader = torch.utils.data.DataLoader(data, batch_size=ebs.choice.local_bsz, shuffle=True)
        sizes.append(ebs.choice.global_batch)
        for i, (x, y) in enumerate(loader):
            with ebs.timed_microbatch(len(x)):
                (torch.nn.functional.mse_loss(model(x), y) / ebs.accumulation_steps).backward()
            ebs.record_microbatch(model.parameters())
            if (i + 1) % ebs.accumulation_steps == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()
                schedule.step()
                steps += 1
    assert max(sizes) > 32  # it grew
    assert steps < 0.7 * total  # far fewer steps than the schedule was sized for
    assert total - epochs <= schedule.last_epoch <= total  # short batches count their samples
    assert schedule.state_dict()["total_steps"] == total  # the schedule's own state


def _loop_with_a_schedule(
    stepped: str, follow: bool = False, epochs: int = 3, grow: bool = True
) -> ElasticBatchSize:
    """A plain loop whose batch doubles each epoch, its rate set by a one-cycle schedule
    (``stepped`` "step": each optimizer step, "epoch": a StepLR each epoch)."""
    torch.manual_seed(0)
    data = regression(n=1024)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 256), lr_rule="linear")
    ebs.attach(optimizer)
    schedule: Any = (
        torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=epochs * 1024 // 32)
        if stepped == "step"
        else torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    )
    if follow:
        schedule = ebs.follow(schedule)
    for epoch in range(epochs):
        if epoch and grow:
            ebs.update_scale(ebs.scale * 2)
        loader = torch.utils.data.DataLoader(data, batch_size=ebs.choice.local_bsz)
        for i, (x, y) in enumerate(loader):
            (torch.nn.functional.mse_loss(model(x), y) / ebs.accumulation_steps).backward()
            ebs.record_microbatch(model.parameters())
            if (i + 1) % ebs.accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
                if stepped == "step":
                    schedule.step()
        if stepped == "epoch":
            schedule.step()
    return ebs


def test_a_schedule_stepped_each_step_and_not_followed_is_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="zeus_bso.elastic"):
        _loop_with_a_schedule("step")
    said = [r.getMessage() for r in caplog.records if r.name.startswith("zeus_bso.elastic")]
    assert len(said) == 1
    assert "ebs.follow(scheduler)" in said[0]
    assert "2x the initial" in said[0]  # said as soon as the batch grew


@pytest.mark.parametrize(
    ("stepped", "follow", "grow"),
    [("step", True, True), ("epoch", False, True), ("step", False, False)],
    ids=["followed", "stepped each epoch", "the batch never grew"],
)
def test_a_schedule_that_keeps_pace_is_not_warned_of(
    caplog: pytest.LogCaptureFixture, stepped: str, follow: bool, grow: bool
) -> None:
    with caplog.at_level("WARNING", logger="zeus_bso.elastic"):
        ebs = _loop_with_a_schedule(stepped, follow=follow, grow=grow)
    assert (ebs.scale > 1) == grow
    assert not [r for r in caplog.records if r.name.startswith("zeus_bso.elastic")]


@pytest.mark.parametrize("wrapper", ["fabric", "accelerate"])
def test_a_fabric_or_accelerate_loop_steps_at_the_scaled_rate_and_follows_its_schedule(
    wrapper: str,
) -> None:
    # The plain loop through their wrappers: attach the optimizer that setup/prepare returned,
    # follow the schedule (Accelerate's prepared one), each epoch's DataLoader prepared again.
    torch.manual_seed(0)
    data, epochs = regression(n=1024), 3
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    schedule: Any = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, total_steps=96)
    if wrapper == "fabric":
        fabric_module = pytest.importorskip("lightning.fabric", reason="pip install lightning")
        runner = fabric_module.Fabric(accelerator="cpu", devices=1)
        model, optimizer = runner.setup(model, optimizer)
        prepare, backward = runner.setup_dataloaders, runner.backward
    else:
        accelerate = pytest.importorskip("accelerate", reason="pip install accelerate")
        runner = accelerate.Accelerator(cpu=True)
        model, optimizer, schedule = runner.prepare(model, optimizer, schedule)
        prepare, backward = runner.prepare, runner.backward
    ebs = ElasticBatchSize(32, max_batch_size=256, lr_rule="linear")
    ebs.attach(optimizer)
    schedule = ebs.follow(schedule)
    taken: list[tuple[float, float]] = []  # (the rate a step took, the schedule's rate)
    for epoch in range(epochs):
        if epoch:
            ebs.update_scale(ebs.scale * 2)
        loader = prepare(torch.utils.data.DataLoader(data, batch_size=ebs.choice.local_bsz))
        for i, (x, y) in enumerate(loader):
            with ebs.timed_microbatch(len(x)):
                backward(torch.nn.functional.mse_loss(model(x), y) / ebs.accumulation_steps)
            ebs.record_microbatch(model.parameters())
            if (i + 1) % ebs.accumulation_steps == 0:
                rate = optimizer.param_groups[0]["lr"]
                optimizer.step()
                taken.append((ebs.metrics()["elastic/lr"], rate))
                optimizer.zero_grad()
                schedule.step()
    steps = [1024 // (32 * 2**epoch) for epoch in range(epochs)]  # 32, 16 and 8 steps
    factors = [factor for epoch, n in enumerate(steps) for factor in [2.0**epoch] * n]
    assert len(taken) == sum(steps)
    assert [stepped for stepped, _ in taken] == pytest.approx(
        [rate * factor for (_, rate), factor in zip(taken, factors, strict=True)]
    )
    inner = getattr(schedule.schedule, "scheduler", schedule.schedule)  # Accelerate's wraps it
    assert inner.last_epoch == 96  # 32 steps of the initial size an epoch: the whole course


def test_an_accelerator_that_accumulates_itself_is_refused_at_attach() -> None:
    # Its prepared optimizer steps every k-th call and skips the others, each a step here.
    accelerate = pytest.importorskip("accelerate", reason="pip install accelerate")
    from zeus_bso.errors import ConfigurationError

    try:
        accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=4)
        model = torch.nn.Linear(8, 1)
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), 0.1))
        with pytest.raises(ConfigurationError, match="accumulates 4 micro-batches"):
            ElasticBatchSize(32).attach(optimizer)
    finally:
        accelerate.state.GradientState._reset_state()  # a singleton: not for the next tests


def test_the_micro_batches_gradients_give_the_noise_exactly_and_a_late_branch_counts() -> None:
    # Two micro-batches of a step, each with a gradient of its own; a parameter that only the
    # second one reaches (a branch the first did not take) counts from zero.
    from zeus_bso.elastic import GradientNoiseEstimator

    trunk = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    branch = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    optimizer = torch.optim.SGD([trunk, branch], lr=0.1)
    ebs = ElasticBatchSize(8, min_accumulation=2)  # 4 samples a micro-batch, 2 of them
    ebs.attach(optimizer)
    first = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    second = (torch.tensor([0.5, -1.0, 3.0], dtype=torch.float64), torch.tensor([2.0, 1.0]))
    trunk.grad = first / 2  # backward of the loss divided by the 2 micro-batches
    ebs.record_microbatch([trunk, branch])
    trunk.grad = trunk.grad + second[0] / 2
    branch.grad = (second[1] / 2).double()
    ebs.record_microbatch([trunk, branch])
    optimizer.step()
    expected = GradientNoiseEstimator()
    mean = torch.cat([(first + second[0]) / 2, second[1].double() / 2])
    expected.update(
        [float(first.pow(2).sum()), float(second[0].pow(2).sum() + second[1].pow(2).sum())],
        float(mean.pow(2).sum()),
        4,
    )
    assert ebs.noise.sqr == pytest.approx(expected.sqr, rel=1e-12)
    assert ebs.noise.var == pytest.approx(expected.var, rel=1e-12)


def test_a_sparse_embeddings_gradient_gives_the_noise_its_dense_one_does() -> None:
    # nn.Embedding(sparse=True): its gradient is a sparse tensor, which the multi-tensor
    # kernels do not take.
    def noise(sparse: bool) -> tuple[float | None, float | None]:
        torch.manual_seed(0)
        embedding = torch.nn.Embedding(10, 4, sparse=sparse)
        head = torch.nn.Linear(4, 1)
        parameters = [*embedding.parameters(), *head.parameters()]
        optimizer = torch.optim.SGD(parameters, lr=0.1)
        ebs = ElasticBatchSize(8)
        ebs.attach(optimizer)
        for _ in range(3):
            for rows in ([1, 3, 3, 7], [2, 3, 5, 9]):
                (head(embedding(torch.tensor(rows))).pow(2).mean() / 2).backward()
                ebs.record_microbatch(parameters)
            optimizer.step()
            optimizer.zero_grad()
        return ebs.noise.sqr, ebs.noise.var

    (sqr, var), (dense_sqr, dense_var) = noise(sparse=True), noise(sparse=False)
    assert sqr == pytest.approx(dense_sqr, rel=1e-5)
    assert var == pytest.approx(dense_var, rel=1e-5)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA GPU: a micro-batch timed by its device's work (run where one is lent)",
)
def test_on_a_gpu_a_micro_batch_is_timed_by_its_device_work() -> None:
    # CUDA launches asynchronously: a host clock around the work ended when the kernels were
    # queued, and every batch size looked as fast as its launches.
    x = torch.randn(4096, 4096, device="cuda")
    (x @ x).tanh()  # cuBLAS's first call sets it up on the host
    torch.cuda.synchronize()
    ebs = ElasticBatchSize(32)
    local = ebs.choice.local_bsz
    launched = time.perf_counter()
    with ebs.timed_microbatch(local):
        for _ in range(20):
            x = (x @ x).tanh()
    launched = time.perf_counter() - launched
    assert local not in ebs.throughput._samples  # read at the next decision, not in the step
    started, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    started.record()
    for _ in range(20):
        x = (x @ x).tanh()
    ended.record()
    ebs.get_local_bsz()  # reads the device's times
    (measured,) = ebs.throughput._samples[local]
    assert measured * 1000 >= 0.8 * started.elapsed_time(ended)  # the same work, on the device
    assert measured > 2 * launched  # not its launch
