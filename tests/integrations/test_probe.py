"""The adapters' shared "try steps and undo" probe (`zeus_bso.integrations.probe`): after the
steps, the weights, the optimizers' state, the random state and the model's mode are what they
were, whether the steps ended or raised."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch", reason="the probe needs torch (pip install torch)")

from zeus_bso.integrations.probe import step, undone  # noqa: E402


def _model_and_optimizers() -> tuple[object, list[object]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    first = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    second = torch.optim.Adam(model[2].parameters(), lr=0.01)
    return model, [first, second]


def _steps(model: object, optimizers: list[object], count: int) -> None:
    for _ in range(count):
        loss = model(torch.randn(16, 4)).pow(2).mean()  # type: ignore[operator]
        step(loss, optimizers)


@pytest.mark.parametrize("raises", [False, True])
def test_the_steps_tried_are_undone(raises: bool) -> None:
    model, optimizers = _model_and_optimizers()
    _steps(model, optimizers, 2)  # optimizers with state (momentum, Adam's moments)
    model.eval()  # type: ignore[attr-defined]
    weights = {k: v.clone() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    states = [repr(o.state_dict()) for o in optimizers]  # type: ignore[attr-defined]
    rng = torch.random.get_rng_state()
    expected = pytest.raises(RuntimeError) if raises else contextlib.nullcontext()
    with expected, undone(model, optimizers):
        assert model.training  # type: ignore[attr-defined]
        _steps(model, optimizers, 3)
        if raises:
            raise RuntimeError("CUDA out of memory (a stand-in)")
    after = model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(weights[k], after[k]) for k in weights)
    assert [repr(o.state_dict()) for o in optimizers] == states  # type: ignore[attr-defined]
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert not model.training  # type: ignore[attr-defined]
    assert all(p.grad is None for p in model.parameters())  # type: ignore[attr-defined]


def test_a_step_without_a_loss_takes_nothing() -> None:
    model, optimizers = _model_and_optimizers()
    before = {k: v.clone() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    step(None, optimizers)
    after = model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(before[k], after[k]) for k in before)
