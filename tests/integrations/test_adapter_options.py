"""Every adapter checks the options it passes on to the session when it is built, before a model
loads or the server is asked: a wrong one is a `ConfigurationError` that names it, from each
adapter alike (`zeus_bso.training.session_options.checked_options`). The server URL names a
port nothing listens on: nothing may be sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.ports import free_port
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.errors import ConfigurationError
from zeus_bso.training import TrialSession

JOB = JobSpec(
    job_id_prefix="adapter-options",
    batch_sizes=[8, 16, 32],
    default_batch_size=16,
    target_metric=0.8,
    max_epochs=3,
    lr_rule="linear",
)

WRONG: list[tuple[dict[str, Any], str]] = [
    ({"on_server_unavailable": "skip"}, "on_server_unavailable"),
    ({"lr_rule": "cosine"}, "lr_rule"),
    ({"reference_batch_size": 0, "lr_rule": "linear"}, "reference_batch_size"),
    ({"reference_batch_size": -16, "lr_rule": "linear"}, "reference_batch_size"),
    ({"reference_batch_size": 12.5, "lr_rule": "linear"}, "reference_batch_size"),
    ({"max_micro_batch_size": 0}, "max_micro_batch_size"),
    ({"power_limit": "max"}, "power_limit"),
    ({"energy_meter": "nvml"}, "energy_meter"),
    ({"token": 1234}, "token"),
    ({"raise_if_unconverged": "yes"}, "raise_if_unconverged"),
    ({"lr_rule": "sqrt"}, "the job says lr_rule='linear'"),  # JOB's own rule
]


def _lightning(url: str, options: dict[str, Any]) -> Any:
    pytest.importorskip("lightning", reason="pip install 'zeus-bso[lightning]'")
    from zeus_bso.integrations.lightning import ZeusBSOCallback

    return ZeusBSOCallback(url, JOB, **{"monitor": "val_acc", **options})


def _huggingface(url: str, options: dict[str, Any]) -> Any:
    pytest.importorskip("transformers", reason="pip install 'zeus-bso[huggingface]'")
    from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

    return ZeusBSOTrainerCallback(url, JOB, **options)


def _accelerate(url: str, options: dict[str, Any]) -> Any:
    accelerate = pytest.importorskip("accelerate", reason="pip install 'zeus-bso[accelerate]'")
    from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

    return ZeusBSOAccelerate(accelerate.Accelerator(cpu=True), url, JOB, **options)


def _session(url: str, options: dict[str, Any]) -> Any:
    return TrialSession(True, lambda values, step: None, url, JOB, **options)


def _optimizer(url: str, options: dict[str, Any]) -> Any:
    return BatchSizeOptimizer(url, JOB, **options)


ADAPTERS: dict[str, Callable[[str, dict[str, Any]], Any]] = {
    "lightning": _lightning,
    "huggingface": _huggingface,
    "accelerate": _accelerate,
    "session": _session,
    "optimizer": _optimizer,
}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize(("options", "named"), WRONG, ids=[str(o) for o, _ in WRONG])
def test_a_wrong_option_is_refused_when_the_adapter_is_built(
    adapter: str, options: dict[str, Any], named: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a request would fail otherwise
    with pytest.raises(ConfigurationError, match=named):
        ADAPTERS[adapter](url, options)


@pytest.mark.parametrize("adapter", ["lightning", "huggingface"])
@pytest.mark.parametrize("steps", [-1, 1.5, True])
def test_the_callbacks_refuse_a_memory_check_that_is_no_number_of_steps(
    adapter: str, steps: Any
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError, match="memory_check_steps"):
        ADAPTERS[adapter](url, {"memory_check_steps": steps})


@pytest.mark.parametrize(
    ("adapter", "options", "named"),
    [
        ("lightning", {"monitor": ""}, "monitor"),
        ("lightning", {"monitor": 5}, "monitor"),
        ("lightning", {"batch_arg_name": ""}, "batch_arg_name"),
        ("lightning", {"batch_arg_name": None}, "batch_arg_name"),
        ("huggingface", {"metric": None}, "metric"),
        ("huggingface", {"metric": ""}, "metric"),
    ],
)
def test_the_callbacks_refuse_a_name_that_names_nothing(
    adapter: str, options: dict[str, Any], named: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError, match=named):
        ADAPTERS[adapter](url, options)


@pytest.mark.parametrize("adapter", ["lightning", "huggingface", "accelerate", "session"])
def test_a_misspelt_option_is_refused_with_the_name_it_likely_meant(adapter: str) -> None:
    """The adapters take the session's options as keywords (`RunOptions`, `SessionOptions`):
    a misspelt one was passed on and never read (the run trained without the learning-rate
    rule it asked for)."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError, match=r"'lr_rul' is not an option.*'lr_rule'"):
        ADAPTERS[adapter](url, {"lr_rul": "linear"})


@pytest.mark.parametrize("adapter", ["lightning", "huggingface"])
def test_the_callbacks_refuse_resume_which_they_read_from_checkpoints(adapter: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError, match="'resume' is not an option"):
        ADAPTERS[adapter](url, {"resume": {"trial_number": 1}})


@pytest.mark.parametrize(
    ("adapter", "given", "meant"),
    [
        ("lightning", "monitr", "monitor"),
        ("lightning", "memory_check_step", "memory_check_steps"),
        ("huggingface", "resume_from_checkpoints", "resume_from_checkpoint"),
        ("session", "power_limits", "power_limit"),
    ],
)
def test_a_misspelt_parameter_of_the_adapter_itself_is_named_too(
    adapter: str, given: str, meant: str
) -> None:
    """A name close to one of the adapter's own parameters (not a session option) is named as
    well: ``monitr`` was refused as no option of the run, with no word of ``monitor``."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError, match=f"did you mean '{meant}'"):
        ADAPTERS[adapter](url, {given: "x"})
