"""The Hugging Face Trainer's checkpoints and a run's trial: every checkpoint a run with
`zeus_bso.integrations.huggingface.ZeusBSOTrainerCallback` saves holds a `STATE_FILE`, from which
a run resumed from that checkpoint continues its trial."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zeus_bso.errors import ConfigurationError

STATE_FILE = "zeus_bso_trial.json"


def checkpoint_to_resume(
    resume_from_checkpoint: str | os.PathLike[str] | bool | None,
    output_dir: str | os.PathLike[str] | None,
) -> Path | None:
    """The checkpoint directory a run resumes from (None: a fresh run); ``True``: the last in
    ``output_dir``, as ``Trainer.train(resume_from_checkpoint=True)`` takes it."""
    if resume_from_checkpoint is True:
        if output_dir is None:
            raise ConfigurationError(
                "resume_from_checkpoint=True resumes from the last checkpoint in the Trainer's "
                "output_dir: pass output_dir=... to the callback too (or a checkpoint's path)"
            )
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(os.fspath(output_dir)) if Path(output_dir).is_dir() else None
        if last is None:
            raise ConfigurationError(
                f"resume_from_checkpoint=True but {output_dir} holds no checkpoint "
                "(checkpoint-<step> directory); leave it out for a fresh run"
            )
        return Path(last)
    if resume_from_checkpoint is False or resume_from_checkpoint is None:
        return None
    return Path(resume_from_checkpoint)


def saved_trial(checkpoint: Path) -> dict[str, Any]:
    """What a run saved of its trial into ``checkpoint``."""
    path = checkpoint / STATE_FILE
    try:
        saved: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigurationError(
            f"cannot resume from {checkpoint}: no readable {STATE_FILE} ({err}); "
            "it is written into every checkpoint a run with this callback saves"
        ) from err
    return saved


def save_trial(checkpoint: Path, saved: dict[str, Any]) -> None:
    """Save a run's trial into ``checkpoint``, a directory the Trainer saved (nothing if it
    did not)."""
    if checkpoint.is_dir():
        (checkpoint / STATE_FILE).write_text(json.dumps(saved))


def resume_refused(global_step: int, resume_from: Path | None) -> str | None:
    """Why a run cannot train as the Trainer and the callback start it, where one resumes a
    checkpoint and the other does not (``global_step``: the Trainer's at the start of training,
    above 0 where it resumed a checkpoint; ``resume_from``: the callback's). None: they agree."""
    if global_step > 0 and resume_from is None:
        return (
            f"the Trainer resumed a checkpoint (at step {global_step}) that the callback was not "
            "given, so this run's trial would count a model trained before it as its own: give "
            "the callback the same checkpoint (ZeusBSOTrainerCallback(..., "
            "resume_from_checkpoint=...), as to trainer.train) so that the run continues its "
            "trial, or train from scratch"
        )
    if global_step == 0 and resume_from is not None:
        return (
            f"the callback continues the trial of {resume_from}, but the Trainer starts from "
            "scratch: pass the checkpoint to trainer.train(resume_from_checkpoint=...) too, or "
            "leave it out of the callback for a new run"
        )
    return None
