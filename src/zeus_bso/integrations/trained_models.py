"""Models that a run of a job trained in this process, as that run left them.

A notebook cell that fits again the model an earlier cell fitted, or a script that fits one
model twice with one callback, trains a model that is trained already: the run reaches the
target sooner than from the model's initial weights, and the server learns its batch size's
cost from it, as if it were a run from scratch (a size tried so can look the cheapest for good).
Such a run of the same job is refused when training starts, before any step (`trained_here`;
Lightning's module, the HF Trainer's model, the models an Accelerate accelerator prepared, and
in a Fabric loop the parameters of the optimizer given to ``bso.scale``). A model is known by its
first parameter, which moving it to a device, wrapping it (``fabric.setup``) or loading a
state dict into it keeps.
A model built again, or whose weights were set anew since (``reset_parameters``, a checkpoint
loaded into it), trains as usual; so does one that a run of another job trained (a second
phase of training is a job of its own).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zeus_bso.integrations.probe import sharding

if TYPE_CHECKING:
    from zeus_bso.training import TrialSession


@dataclass(frozen=True)
class _Trained:
    job_id: str
    trial_number: int | None
    weights: float
    """`_fingerprint` of the weights as the run left them."""


_TRAINED: dict[int, tuple[weakref.ref[Any], _Trained]] = {}
"""Each model a run trained in this process, by the ``id`` of its first parameter, kept weakly
(a model dropped is forgotten). Not a ``WeakKeyDictionary``: one compares its keys with ``==``,
which a tensor answers element by element."""


def _known(first: Any) -> _Trained | None:
    kept = _TRAINED.get(id(first))
    return kept[1] if kept is not None and kept[0]() is first else None


def _keep(first: Any, trained: _Trained) -> None:
    key = id(first)
    _TRAINED[key] = (weakref.ref(first, lambda _: _TRAINED.pop(key, None)), trained)


def _weights(model: Any) -> list[Any] | None:
    """The parameters of ``model``, a module or an optimizer (its parameter groups'). None:
    none, or not to be read (a model sharded across processes, whose parameters each holds a
    part of)."""
    if hasattr(model, "param_groups"):
        weights = [p for group in model.param_groups for p in group["params"]]
        if any(hasattr(p, "ds_id") or type(p).__name__ == "DTensor" for p in weights):
            return None
        return weights or None
    if sharding(model) is not None:
        return None
    return list(model.parameters()) or None


def _fingerprint(weights: list[Any]) -> float | None:
    """The sum of every parameter's sum: the same while the weights are. Each is summed in its
    own precision (half and bfloat16 ones accumulated in float32, which reduces them as they
    are: no copy of a parameter is made, which a GPU that the model nearly fills could not
    hold). None: not taken (parameters that cannot be read: lazy, on the meta device)."""
    import torch

    halves = (torch.float16, torch.bfloat16)
    try:
        with torch.no_grad():
            return sum(
                float(p.detach().sum(dtype=torch.float32 if p.dtype in halves else None))
                for p in weights
            )
    except (RuntimeError, ValueError, NotImplementedError):
        return None


def remember(model: Any, run: TrialSession) -> None:
    """``run`` ended, having trained ``model`` (a module, or the optimizer of its parameters)
    where it reported an epoch (a run that trained none left it as it was)."""
    if run.job_id is None or run.progress.epochs == 0 or model is None:
        return
    weights = _weights(model)
    if weights is not None and (fingerprint := _fingerprint(weights)) is not None:
        _keep(weights[0], _Trained(run.job_id, run.trial_number, fingerprint))


def trained_here(model: Any, run: TrialSession) -> str | None:
    """Why ``run`` cannot train ``model`` (a module, or the optimizer of its parameters): an
    earlier run of its job trained it in this process, and its weights are still as that run
    left them. None: it is not known to be trained, or that run was this trial (a run that
    resumes it)."""
    job_id, trial_number, batch_size = run.job_id, run.trial_number, run.batch_size
    weights = None if model is None else _weights(model)
    earlier = None if weights is None else _known(weights[0])
    if weights is None or earlier is None or job_id is None or earlier.job_id != job_id:
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
