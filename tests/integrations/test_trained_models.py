"""`zeus_bso.training.trained_models`: what says that a model is as a run left it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="pip install torch")

from zeus_bso.training import trained_models  # noqa: E402


def run(job_id: str, trial: int, batch_size: int = 32, epochs: int = 3) -> Any:
    """What `trained_models` reads of a run (`zeus_bso.training.TrialSession`'s fields)."""
    return SimpleNamespace(
        job_id=job_id,
        trial_number=trial,
        batch_size=batch_size,
        progress=SimpleNamespace(epochs=epochs),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_model_is_known_as_trained_until_one_weight_changes(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2)).to(dtype)
    trained_models.remember(model, run("job-a", 1))
    assert trained_models.trained_here(model, run("job-a", 2)) is not None
    assert trained_models.trained_here(model, run("job-b", 2)) is None  # another job's run
    assert trained_models.trained_here(model, run("job-a", 1)) is None  # its own trial, resumed
    with torch.no_grad():
        model[1].bias[0] += 0.5  # one step of training, as small as a run's last one
    assert trained_models.trained_here(model, run("job-a", 2)) is None
    trained_models.remember(model, run("job-a", 2))
    said = trained_models.trained_here(model, run("job-a", 3, batch_size=64))
    assert said is not None
    assert said.startswith("the model this run would train is the one trial 2 of job job-a")
    assert "batch size 64 would look cheaper than it is" in said


def test_a_run_that_reported_nothing_leaves_the_model_unknown() -> None:
    model = torch.nn.Linear(4, 4)
    trained_models.remember(model, run("job-a", 1, epochs=0))
    assert trained_models.trained_here(model, run("job-a", 2)) is None


def test_a_model_dropped_is_forgotten() -> None:
    model = torch.nn.Linear(4, 4)
    trained_models.remember(model, run("job-a", 1))
    size = len(trained_models._TRAINED)
    del model
    assert len(trained_models._TRAINED) == size - 1


def test_an_optimizer_of_a_models_parameters_names_that_model() -> None:
    """A loop that gives the session only its optimizer (Fabric's ``bso.scale``): the model is
    known by its first parameter, whichever of the two a run named."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    trained_models.remember(torch.optim.SGD(model.parameters(), lr=0.1), run("job-a", 1))
    assert trained_models.trained_here(model, run("job-a", 2)) is not None
    again = torch.optim.AdamW(model.parameters())  # a new optimizer, the same weights
    assert trained_models.trained_here(again, run("job-a", 2)) is not None
    other = torch.nn.Linear(8, 8)  # another model of the same shape
    assert (
        trained_models.trained_here(torch.optim.SGD(other.parameters(), lr=0.1), run("job-a", 2))
        is None
    )


def test_an_optimizer_of_sharded_parameters_is_not_judged() -> None:
    """Each process holds a part of a sharded model (FSDP marks the parameters it flattened):
    its sum would differ by process, so no process judges it."""
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trained_models.remember(optimizer, run("job-a", 1))
    model.weight._fsdp_flattened = True  # type: ignore[attr-defined]
    assert trained_models.trained_here(optimizer, run("job-a", 2)) is None


def test_the_parameters_a_run_trains_are_its_optimizers_each_counted_once() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))  # 72 + 18
    whole = torch.optim.SGD(model.parameters(), lr=0.1)
    head = torch.optim.AdamW(model[1].parameters())
    assert trained_models.trained_parameters([whole]) == 90
    assert trained_models.trained_parameters([whole, head]) == 90
    assert trained_models.trained_parameters([head]) == 18
    assert trained_models.trained_parameters([]) is None
    lazy = torch.nn.LazyLinear(4)  # not made until its first forward
    assert trained_models.trained_parameters([torch.optim.SGD(lazy.parameters(), lr=0.1)]) is None
    model[0].weight._fsdp_flattened = True  # type: ignore[attr-defined]
    assert trained_models.trained_parameters([whole]) is None  # each process holds a part
