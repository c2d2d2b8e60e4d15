"""Models that a run of a job trained in this process, as that run left them.

A notebook cell that fits again the model an earlier cell fitted, or a script that fits one
model twice with one callback, trains a model that is trained already: the run reaches the
target sooner than from the model's initial weights, and the server learns its batch size's
cost from it, as if it were a run from scratch (a size tried so can look the cheapest for good).
Such a run of the same job is refused before any step (`trained_here`): where training starts
for Lightning's module, the HF Trainer's model and the models an Accelerate accelerator prepared;
in any loop (a Fabric one, a plain one), before the first step of each optimizer, whose
parameters are the model's (`zeus_bso.training.step_count.StepCount`). A model is known by its
first parameter and their number, which moving it to a device, wrapping it (``fabric.setup``)
or loading a state dict into it keeps.
A model built again, or whose weights were set anew since (``reset_parameters``, a checkpoint
loaded into it), trains as usual; so does one that a run of another job trained (a second
phase of training is a job of its own).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from zeus_bso.client.progress import TrialProgress
from zeus_bso.training.sharded import sharded_parameter, sharding


class Run(Protocol):
    """What is read of a run (`zeus_bso.training.TrialSession`'s)."""

    @property
    def job_id(self) -> str: ...

    @property
    def trial_number(self) -> int | None: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def progress(self) -> TrialProgress: ...


@dataclass(frozen=True)
class _Trained:
    job_id: str
    trial_number: int | None
    weights: float
    """`_fingerprint` of the weights as the run left them."""


_TRAINED: dict[tuple[int, int], tuple[weakref.ref[Any], _Trained]] = {}
"""Each model a run trained in this process, by the ``id`` of its first parameter and their
number, kept weakly (a model dropped is forgotten). Not a ``WeakKeyDictionary``: one compares
its keys with ``==``, which a tensor answers element by element."""


def _known(weights: list[Any]) -> _Trained | None:
    kept = _TRAINED.get((id(weights[0]), len(weights)))
    return kept[1] if kept is not None and kept[0]() is weights[0] else None


def _keep(weights: list[Any], trained: _Trained) -> None:
    key = (id(weights[0]), len(weights))
    _TRAINED[key] = (weakref.ref(weights[0], lambda _: _TRAINED.pop(key, None)), trained)


def _grouped(optimizer: Any) -> list[Any]:
    """The parameters of ``optimizer``'s groups."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _weights(model: Any) -> list[Any] | None:
    """The parameters of ``model``, a module or an optimizer (its parameter groups'). None:
    none, or not to be read (a model sharded across processes, whose parameters each holds a
    part of: each process would judge it by its own)."""
    if hasattr(model, "param_groups"):
        weights = _grouped(model)
        return None if any(sharded_parameter(p) for p in weights) else weights or None
    if sharding(model) is not None:
        return None
    return list(model.parameters()) or None


def _fingerprint(weights: list[Any]) -> float | None:
    """The sum of every parameter's sum: the same while the weights are, in whatever order
    they come (an optimizer's groups order them otherwise than the module: ``math.fsum``).
    Each is summed in its own precision (half and bfloat16 ones accumulated in float32, which
    reduces them as they are: no copy of a parameter is made, which a GPU that the model
    nearly fills could not hold). None: not taken (parameters that cannot be read: lazy, on
    the meta device)."""
    import torch

    halves = (torch.float16, torch.bfloat16)
    try:
        with torch.no_grad():
            return math.fsum(
                float(p.detach().sum(dtype=torch.float32 if p.dtype in halves else None))
                for p in weights
            )
    except (RuntimeError, ValueError, NotImplementedError):
        return None


def trained_parameters(optimizers: Iterable[Any]) -> int | None:
    """The number of parameters ``optimizers`` train, each counted once: the size of the run's
    model, which its reports say (the server says when a job's runs trained models of other
    sizes). A ``DTensor`` (FSDP's ``fully_shard``) counts whole, as its global shape says, on
    every process. None: no optimizer, or parameters not to be counted (another process's part
    of a model sharded otherwise: FSDP's flattened ones, DeepSpeed's ZeRO-3; lazy parameters
    not yet made)."""
    each = {id(p): p for optimizer in optimizers for p in _grouped(optimizer)}
    whole = [type(p).__name__ == "DTensor" or not sharded_parameter(p) for p in each.values()]
    if not each or not all(whole):
        return None
    try:
        return sum(int(p.numel()) for p in each.values()) or None
    except (RuntimeError, ValueError, NotImplementedError):
        return None


def remember(model: Any, run: Run) -> None:
    """``run`` ended, having trained ``model`` (a module, or the optimizer of its parameters)
    where it reported an epoch (a run that trained none left it as it was)."""
    if run.progress.epochs == 0 or model is None:
        return
    weights = _weights(model)
    if weights is not None and (fingerprint := _fingerprint(weights)) is not None:
        _keep(weights, _Trained(run.job_id, run.trial_number, fingerprint))


def trained_here(model: Any, run: Run) -> str | None:
    """Why ``run`` cannot train ``model`` (a module, or the optimizer of its parameters): an
    earlier run of its job trained it in this process, and its weights are still as that run
    left them. None: it is not known to be trained, or that run was this trial (a run that
    resumes it)."""
    job_id, trial_number, batch_size = run.job_id, run.trial_number, run.batch_size
    weights = None if model is None else _weights(model)
    earlier = None if weights is None else _known(weights)
    if weights is None or earlier is None or earlier.job_id != job_id:
        return None
    if trial_number is not None and earlier.trial_number == trial_number:
        return None
    if _fingerprint(weights) != earlier.weights:
        return None
    trial = f"trial {earlier.trial_number}" if earlier.trial_number is not None else "a run"
    return (
        f"the model this run would train is the one {trial} of job {job_id} trained in this "
        "process, its weights as that run left them: the run would start trained and reach "
        f"the target sooner than from the model's initial weights, so batch size {batch_size} "
        "would look cheaper than it is; build the model again for each run (in a notebook, "
        "run the cell that builds it again), or train a second phase (fine-tuning) as a job "
        "of its own (the run is not counted against the batch size)"
    )
