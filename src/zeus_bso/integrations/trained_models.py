"""Models that a run of a job trained in this process, as that run left them.

A notebook cell that fits again the model an earlier cell fitted, or a script that fits one
model twice with one callback, trains a model that is trained already: the run reaches the
target sooner than from the model's initial weights, and the server learns its batch size's
cost from it, as if it were a run from scratch (a size tried so can look the cheapest for good).
Such a run of the same job is refused when training starts, before any step (`trained_here`;
Lightning's module, the HF Trainer's model, the models an Accelerate accelerator prepared).
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


_TRAINED: weakref.WeakKeyDictionary[Any, _Trained] = weakref.WeakKeyDictionary()
"""Each model a run trained in this process (kept weakly: a model dropped is forgotten)."""


def _fingerprint(model: Any) -> float | None:
    """The sum of every parameter's sum: the same while the weights are. Each is summed in its
    own precision (half and bfloat16 ones accumulated in float32, which reduces them as they
    are: no copy of a parameter is made, which a GPU that the model nearly fills could not
    hold). None: not taken (a model sharded across processes, whose parameters each holds a
    part of, or one whose parameters cannot be read: lazy, on the meta device)."""
    import torch

    halves = (torch.float16, torch.bfloat16)
    try:
        if sharding(model) is not None:
            return None
        with torch.no_grad():
            return sum(
                float(p.detach().sum(dtype=torch.float32 if p.dtype in halves else None))
                for p in model.parameters()
            )
    except (RuntimeError, ValueError, NotImplementedError):
        return None


def remember(model: Any, run: TrialSession) -> None:
    """``run`` ended, having trained ``model`` where it reported an epoch (a run that trained
    none left it as it was)."""
    if run.job_id is None or run.progress.epochs == 0:
        return
    weights = _fingerprint(model)
    if weights is not None:
        _TRAINED[model] = _Trained(run.job_id, run.trial_number, weights)


def trained_here(model: Any, run: TrialSession) -> str | None:
    """Why ``run`` cannot train ``model``: an earlier run of its job trained it in this
    process, and its weights are still as that run left them. None: it is not known to be
    trained, or that run was this trial (a run that resumes it)."""
    job_id, trial_number, batch_size = run.job_id, run.trial_number, run.batch_size
    earlier = _TRAINED.get(model)
    if earlier is None or job_id is None or earlier.job_id != job_id:
        return None
    if trial_number is not None and earlier.trial_number == trial_number:
        return None
    if _fingerprint(model) != earlier.weights:
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
