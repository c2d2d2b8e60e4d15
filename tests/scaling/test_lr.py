"""The learning-rate rules (`zeus_bso.scaling.lr`): their factors, ``auto``'s choice, upstream's
scalers, warm-up in samples, and optimizers and schedulers scaled once."""

from __future__ import annotations

import logging
import math

import pytest

from zeus_bso.errors import ConfigurationError
from zeus_bso.scaling import LinearScaler, LrScaling, SquareRootScaler, lr_factor, warmup_steps
from zeus_bso.scaling.lr import check_rule, resolved

torch = pytest.importorskip("torch", reason="the optimizers' tests need torch (pip install torch)")


def test_each_rule_gives_its_factor() -> None:
    assert lr_factor("linear", 128, 32) == 4.0
    assert lr_factor("sqrt", 128, 32) == 2.0
    assert lr_factor("none", 128, 32) == 1.0
    assert lr_factor("linear", 16, 32) == 0.5
    assert lr_factor("sqrt", 8, 32) == 0.5
    with pytest.raises(ConfigurationError, match="batch sizes are positive"):
        lr_factor("linear", 0, 32)
    with pytest.raises(ConfigurationError, match="lr_rule is one of none, linear, sqrt, auto"):
        check_rule("cubic")


def test_auto_chooses_by_the_optimizer_family(caplog: pytest.LogCaptureFixture) -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert resolved("auto", torch.optim.SGD(params, lr=0.1)) == "linear"
    assert resolved("auto", torch.optim.AdamW(params, lr=0.1)) == "sqrt"
    assert resolved("auto", torch.optim.Adam(params, lr=0.1)) == "sqrt"
    assert resolved("auto", torch.optim.Adadelta(params)) == "none"
    assert resolved("auto", "RMSprop") == "sqrt"
    with caplog.at_level(logging.WARNING):
        assert resolved("auto", torch.optim.LBFGS(params)) == "none"
    assert "does not know the optimizer LBFGS" in caplog.text
    with pytest.raises(ConfigurationError, match="'auto' chooses by the optimizer"):
        resolved("auto")
    assert LrScaling("auto", 32).factor(64, torch.optim.Adam(params)) == pytest.approx(math.sqrt(2))


def test_upstreams_scalers_port_unchanged() -> None:
    assert LinearScaler(initial_lr=0.1, initial_batch_size=32).compute_lr(64) == 0.2
    assert SquareRootScaler(initial_lr=0.1, initial_batch_size=32).compute_lr(128) == 0.2


def test_warm_up_stays_constant_in_samples() -> None:
    assert warmup_steps(1000, 128, 32) == 250
    assert warmup_steps(10, 16, 32) == 20
    assert warmup_steps(1, 1024, 32) == 1  # never zero when there was a warm-up
    assert warmup_steps(0, 128, 32) == 0


def stepped_rates(optimizer: torch.optim.Optimizer) -> list[float]:
    """The rates each later step of ``optimizer`` takes, group by group (a step hook after the
    factor's)."""
    seen: list[float] = []
    optimizer.register_step_pre_hook(
        lambda stepped, args, kwargs: seen.extend(g["lr"] for g in stepped.param_groups)
    )
    return seen


def train(optimizer: torch.optim.Optimizer, scheduler: object, steps: int) -> list[float]:
    """``steps`` steps of ``optimizer``, each followed by ``scheduler``'s; the schedule's rates
    before each, group by group (what the param groups hold)."""
    rates: list[float] = []
    for _ in range(steps):
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = torch.ones_like(param)
        rates.extend(g["lr"] for g in optimizer.param_groups)
        optimizer.step()
        scheduler.step()  # type: ignore[attr-defined]
    return rates


def test_every_step_takes_the_schedules_rate_times_the_factor_once() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(
        [{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 0.01}], lr=0.1
    )
    step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaling = LrScaling("linear", 32)
    assert scaling.scale(optimizer, 64, [step]) == 2.0
    assert scaling.scale(optimizer, 64, [step]) == 2.0  # again: the factor, not its square
    seen = stepped_rates(optimizer)
    schedule = train(optimizer, step, 3)
    assert schedule == pytest.approx([0.1, 0.01, 0.05, 0.005, 0.025, 0.0025])
    assert seen == pytest.approx([2 * rate for rate in schedule])
    # The param groups, and so a checkpoint, hold the schedule's rates.
    assert [g["lr"] for g in optimizer.state_dict()["param_groups"]] == pytest.approx(
        [0.0125, 0.00125]
    )
    assert step.base_lrs == [0.1, 0.01]
    scaling.rescale(optimizer, 16, [step])  # a batch size that changed under the optimizer
    seen.clear()
    train(optimizer, step, 1)
    assert seen == pytest.approx([0.00625, 0.000625])


def _warm_up_then_cosine(optimizer: torch.optim.Optimizer) -> object:
    sched = torch.optim.lr_scheduler
    warm = sched.LinearLR(optimizer, start_factor=0.1, total_iters=3)
    cosine = sched.CosineAnnealingLR(optimizer, T_max=6)
    return sched.SequentialLR(optimizer, [warm, cosine], milestones=[3])


def _chained(optimizer: torch.optim.Optimizer) -> object:
    sched = torch.optim.lr_scheduler
    return sched.ChainedScheduler(
        [
            sched.ConstantLR(optimizer, factor=0.5, total_iters=2),
            sched.ExponentialLR(optimizer, 0.9),
        ]
    )


def _lambda(optimizer: torch.optim.Optimizer) -> object:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))


def _one_cycle(optimizer: torch.optim.Optimizer) -> object:
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=10)


@pytest.mark.parametrize("schedule", [_warm_up_then_cosine, _chained, _lambda, _one_cycle])
@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.AdamW])
def test_a_schedule_of_any_shape_trains_at_its_rates_times_the_factor(
    schedule: object, optimizer_class: type[torch.optim.Optimizer]
) -> None:
    """The same schedule on a twin optimizer left alone gives the rates the scaled one's steps
    take, divided by the factor, at every step (past a SequentialLR's milestone too)."""
    scaled, alone = (optimizer_class(torch.nn.Linear(2, 2).parameters(), lr=0.001) for _ in "ab")
    scaled_schedule, alone_schedule = schedule(scaled), schedule(alone)  # type: ignore[operator]
    factor = LrScaling("sqrt", 16).scale(scaled, 64, [scaled_schedule])
    assert factor == 2.0
    seen = stepped_rates(scaled)
    schedule_rates = train(alone, alone_schedule, 9)
    assert train(scaled, scaled_schedule, 9) == pytest.approx(schedule_rates)
    assert seen == pytest.approx([factor * rate for rate in schedule_rates])
