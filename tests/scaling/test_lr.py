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


def test_an_optimizer_and_its_schedulers_are_scaled_once() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(
        [{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 0.01}], lr=0.1
    )
    step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaling = LrScaling("linear", 32)
    assert scaling.scale(optimizer, 64, [step]) == 2.0
    assert [g["lr"] for g in optimizer.param_groups] == [0.2, 0.02]
    assert [g["initial_lr"] for g in optimizer.param_groups] == [0.2, 0.02]
    assert step.base_lrs == [0.2, 0.02]
    scaling.scale(optimizer, 64, [step])  # a second call changes nothing
    assert step.base_lrs == [0.2, 0.02]
    optimizer.step()
    step.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.1, 0.01])


def test_one_cycle_keeps_its_peak_scaled() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=10)
    LrScaling("sqrt", 16).scale(optimizer, 64, [cycle])  # x2
    (group,) = optimizer.param_groups
    assert group["max_lr"] == pytest.approx(0.02)
    assert group["initial_lr"] == pytest.approx(0.02 / 25)
    peak = 0.0
    for _ in range(9):
        optimizer.step()
        cycle.step()
        peak = max(peak, group["lr"])
    assert peak == pytest.approx(0.02, rel=0.05)
