"""The Hugging Face Trainer's checkpoints and a run's trial: every checkpoint a run with
`zeus_bso.integrations.huggingface.ZeusBSOTrainerCallback` saves holds the run's trial
(`zeus_bso.training.trial_file`), from which a run resumed from that checkpoint continues it."""

from __future__ import annotations

import os
from pathlib import Path

from zeus_bso.errors import ConfigurationError


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
