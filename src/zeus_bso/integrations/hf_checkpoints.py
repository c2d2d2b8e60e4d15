"""The Hugging Face Trainer's checkpoints and a run's trial: every checkpoint a run with
`zeus_bso.integrations.huggingface.ZeusBSOTrainerCallback` saves holds the run's trial
(`zeus_bso.training.trial_file`), from which a run resumed from that checkpoint continues it
(`Resumption`)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from zeus_bso.errors import ConfigurationError
from zeus_bso.training import TrialSession
from zeus_bso.training.trial_file import STATE_FILE, IfOpen, Resume, read_trial

logger = logging.getLogger(__name__)


class Resumption:
    """Which checkpoint's trial a run continues: the one given to the callback
    (`checkpoint_to_resume`); where it was given none (None, not False), the one its
    ``TrainingArguments`` name (``resume_from_checkpoint``, which the Transformers example
    scripts pass to ``trainer.train``), else the last checkpoint in their ``output_dir`` where it
    holds a trial (`IfOpen`: continued only while that trial is open, a run interrupted before
    it ended; the example scripts resume it too, and a run that trains from scratch continues
    the trial as a run key's restart does). Found as the Trainer is built (`look`)."""

    def __init__(
        self,
        resume_from_checkpoint: str | os.PathLike[str] | bool | None,
        output_dir: str | os.PathLike[str] | None,
    ) -> None:
        self.path = checkpoint_to_resume(resume_from_checkpoint, output_dir)
        """The checkpoint whose trial the run continues (None: a new trial; on every process
        after `took`)."""
        self.looks = resume_from_checkpoint is None
        self.found: IfOpen | None = None
        """The last checkpoint in ``output_dir``, which holds a trial (`look`)."""
        self.continues_found = False

    def option(self) -> Resume:
        """What the session resumes, as the callback was given it (read on the main process)."""
        path = self.path
        return None if path is None else lambda: read_trial(path)

    def look(self, args: Any) -> Resume:
        """What the session resumes, from the Trainer's ``args`` where the callback was given
        no checkpoint (`Resumption`); as given otherwise."""
        if not self.looks:
            return self.option()
        named = args.resume_from_checkpoint
        if isinstance(named, str | os.PathLike) and os.fspath(named):
            self.path = Path(named)  # every process takes it from the arguments
            return self.option()
        from transformers.trainer_utils import get_last_checkpoint

        output_dir = args.output_dir
        last = get_last_checkpoint(output_dir) if output_dir and os.path.isdir(output_dir) else None
        if last is not None and (Path(last) / STATE_FILE).exists():
            self.found = IfOpen(Path(last))
        return self.found

    def took(self, session: TrialSession) -> None:
        """Whether the session continues the trial of the checkpoint `look` found (every
        process takes the main process's answer)."""
        if not self.looks or self.path is not None:  # given, or named by the arguments
            return
        self.continues_found = session.resumed
        if not session.resumed:
            return
        self.path = self.found.checkpoint if self.found else Path("the main process's checkpoint")
        if session.is_main:
            logger.info(
                "zeus-bso: the run continues trial %s of job %s, left open by a run that did "
                "not end, whose checkpoint is the last in output_dir (%s); pass "
                "resume_from_checkpoint=False to the callback for a new trial",
                session.trial_number,
                session.job_id,
                self.path,
            )

    def refused(self, global_step: int, session: TrialSession) -> str | None:
        """Why the run cannot train as the Trainer starts it (`resume_refused`). Where the
        Trainer trains from scratch, the trial of the checkpoint found in ``output_dir`` goes
        on, as a run key's restart does: its epochs are counted again from the first, what was
        reported before counting (`zeus_bso.client.progress.TrialProgress.from_scratch`)."""
        if global_step == 0 and self.continues_found:
            session.on_main(lambda server: server.progress.from_scratch())
            return None
        passed_over = self.found.passed_over if self.found is not None else None
        if global_step > 0 and self.path is None and passed_over is not None:
            return (
                f"the Trainer resumed a checkpoint (at step {global_step}), and the last in "
                f"output_dir, {passed_over}: this run's trial would count a model trained "
                "before it as its own. A recurrence of the job trains a fresh model: give each "
                "run an output_dir of its own, or remove the checkpoints of a run that ended "
                "(scripts written as the Transformers examples resume the last checkpoint there); "
                "to train on from its weights as a new run, load the model from it and do not "
                "resume"
            )
        return resume_refused(global_step, self.path)


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
    checkpoint and the other does not, or they resume checkpoints of other steps
    (``global_step``: the Trainer's at the start of training, above 0 where it resumed a
    checkpoint; ``resume_from``: the callback's). None: they agree."""
    if global_step > 0 and resume_from is None:
        return (
            f"the Trainer resumed a checkpoint (at step {global_step}) that the callback was not "
            "given, so this run's trial would count a model trained before it as its own: give "
            "the callback the same checkpoint (ZeusBSOTrainerCallback(..., "
            "resume_from_checkpoint=...), as to trainer.train) so that the run continues its "
            "trial, or train from scratch"
        )
    saved = step_of(resume_from) if global_step > 0 and resume_from is not None else None
    if saved is not None and saved != global_step:
        return (
            f"the Trainer resumed a checkpoint at step {global_step}, but the callback "
            f"continues the trial of {resume_from}, saved at step {saved}: the trial would "
            "count the steps between them twice (or none of them), their time and energy too. "
            "Resume the same checkpoint in both (trainer.train(resume_from_checkpoint=...) and "
            "the callback's, or TrainingArguments.resume_from_checkpoint, which the callback "
            "reads)"
        )
    if global_step == 0 and resume_from is not None:
        return (
            f"the callback continues the trial of {resume_from}, but the Trainer starts from "
            "scratch: pass the checkpoint to trainer.train(resume_from_checkpoint=...) too, or "
            "leave it out of the callback for a new run"
        )
    return None


def step_of(checkpoint: Path) -> int | None:
    """The optimizer step at which the Trainer saved ``checkpoint`` (its
    ``trainer_state.json``'s ``global_step``); None: it does not say (a path this process
    cannot read: another process's)."""
    try:
        step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if type(step) is int else None
