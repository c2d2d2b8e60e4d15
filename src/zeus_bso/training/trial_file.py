"""A run's trial in its checkpoints: the file zeus-bso writes into a checkpoint directory
(`STATE_FILE`), what ``resume=`` may be (`saved_trial`), and whether a checkpoint that a
framework restores into a running trial holds that trial (`restore_refused`; the loop adapters
refuse it with `zeus_bso.integrations.loop_checkpoints.check_restore`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from zeus_bso.errors import ConfigurationError
from zeus_bso.wire.trials import TrialId

STATE_FILE = "zeus_bso_trial.json"
"""The file in a checkpoint directory that holds the run's trial (``checkpoint()``)."""


@dataclass
class IfOpen:
    """A checkpoint directory whose trial a run continues only where the trial is its job's
    and still open on the server (dispatched, or abandoned by its lease): one the run found
    rather than was given (the HF Trainer's last checkpoint in its ``output_dir``, as the
    Transformers example scripts resume it). Otherwise the run gets a new trial, and
    `passed_over` says why (on the main process)."""

    checkpoint: Path
    passed_over: str | None = None


Resume = (
    Mapping[str, Any] | Callable[[], Mapping[str, Any]] | str | os.PathLike[str] | IfOpen | None
)
"""What a run resumes: what the session's ``checkpoint()`` returned, a function that reads it,
a checkpoint directory holding `STATE_FILE`, or one to resume only if its trial is open."""


def trial_in(checkpoint: Path) -> dict[str, Any] | None:
    """What a run saved of its trial into the directory ``checkpoint`` (None: nothing)."""
    return read_trial(checkpoint) if (checkpoint / STATE_FILE).exists() else None


def read_trial(checkpoint: Path) -> dict[str, Any]:
    """What a run saved of its trial into the directory ``checkpoint``."""
    path = checkpoint / STATE_FILE
    try:
        saved: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigurationError(
            f"cannot resume from {checkpoint}: no readable {STATE_FILE} ({err}); zeus-bso "
            "writes it into every checkpoint of a run (the HF Trainer's, accelerator.save_state's)"
        ) from err
    return saved


def write_trial(checkpoint: Path, saved: Mapping[str, Any]) -> None:
    """Save a run's trial into ``checkpoint``, a directory its framework saved (nothing if it
    did not)."""
    if checkpoint.is_dir():
        (checkpoint / STATE_FILE).write_text(json.dumps(saved))


def saved_trial(resume: Resume) -> Mapping[str, Any] | None:
    """The saved trial that ``resume`` gives (None: a new trial)."""
    if isinstance(resume, str | os.PathLike):
        return read_trial(Path(resume))
    if isinstance(resume, IfOpen):
        return trial_in(resume.checkpoint)
    return resume() if callable(resume) else resume


def restore_refused(
    trial: TrialId | None, saved: Mapping[str, Any] | None, how: str, resume_with: str
) -> str | None:
    """Why a run whose trial is ``trial`` cannot train on from a checkpoint that its framework
    restores (``how``: the call, in words) and that holds ``saved`` (None: no trial of
    zeus-bso): the model, optimizer and schedule trained before would count as this trial's.
    None where it is the run's own trial, or the run trains without the server.
    ``resume_with``: how the run would continue the checkpoint's trial instead."""
    if trial is None:
        return None
    ours = f"this run is trial {trial.trial_number} of job {trial.job_id}"
    if not saved:
        return (
            f"{how} restores a checkpoint that holds no trial of zeus-bso (no {STATE_FILE}), and "
            f"{ours}: what was trained before would count as this trial's. Train from scratch, "
            "or load only the model's weights"
        )
    try:
        theirs = TrialId.model_validate(saved.get("trial"))
    except ValidationError:
        return f"{how} restores a checkpoint whose {STATE_FILE} holds no trial, and {ours}"
    if (theirs.job_id, theirs.trial_number) == (trial.job_id, trial.trial_number):
        return None
    return (
        f"{how} restores trial {theirs.trial_number} of job {theirs.job_id} (batch size "
        f"{theirs.batch_size}), and {ours}: what was trained before would count as this "
        f"trial's. To continue the checkpoint's trial, {resume_with}; or train from scratch"
    )
