"""What a run's first report tells of the loop that trained it, from its optimizer steps since
training began (`StepCount`): a report before any step (a validation of the untrained model),
one after part of an epoch (a loop that validates every few steps), both said; and, in a run
that accumulates, a loop that stepped at about every micro-batch, refused (each step trained a
micro-batch while the server charges the batch size)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from zeus_bso.training.step_count import StepCount

logger = logging.getLogger(__name__)


@dataclass
class FirstReport:
    """A run's optimizer steps, and what its first report said of them."""

    steps: StepCount = field(default_factory=StepCount)
    """The process's optimizer steps from `TrialSession.train_begin`."""
    untrained_said: bool = False
    part_said: bool = False
    """Whether the run's reports within epochs were said (by the first report, or by the
    adapter from the loop's settings)."""

    def untrained(self, reported: int) -> None:
        """Say it where the run's first report (``reported``: the epochs reported before it)
        comes before any optimizer step of this process: a validation of the model as it was
        before training, which counts as one of the job's epochs (a loop that validates at the
        start of each epoch)."""
        if self.untrained_said or reported or not self.steps.untrained:
            return
        self.untrained_said = True
        logger.warning(
            "zeus-bso: the run's first report came before its first optimizer step: a "
            "validation of the model before it trained counts as one of the job's epochs, so "
            "the run's epochs run one ahead of its training (the job's max_epochs ends it an "
            "epoch short, and each report is judged as the epoch after the one it measured). "
            "Report after each epoch's training, not before it"
        )

    def unaccumulated(
        self,
        reported: int,
        epoch: int | None,
        epoch_steps: int | None,
        accumulation: int,
        micro_batch_size: int,
    ) -> str | None:
        """Why the run, at its first report, did not train its batch size: it accumulates
        (``accumulation`` micro-batches of ``micro_batch_size`` a step), but its loop stepped
        an optimizer at about every micro-batch of the epochs it trained (``epoch_steps``
        optimizer steps an epoch: about ``accumulation`` times as many micro-batches), so each
        step took a micro-batch. None: it did, or it is not known (no epoch's steps known, a
        report after the first)."""
        if accumulation < 2 or not epoch_steps or reported:
            return None
        trained = epoch_steps * accumulation * max(1, epoch or 1)  # about the micro-batches
        taken = self.steps.most
        if taken < 0.75 * trained:
            return None
        return (
            f"the run accumulates {accumulation} micro-batches of {micro_batch_size} an "
            f"optimizer step (batch size {accumulation * micro_batch_size}), but its optimizer "
            f"stepped {taken} times over about {trained} micro-batches: each step took one "
            "micro-batch, not the batch size. Step the optimizer every bso.accumulation_steps "
            "micro-batches: wrap each step in accelerator.accumulate(model) (Accelerate), or "
            "step and zero the gradients only then (Fabric, under fabric.no_sync(model) between; "
            "a plain loop); the run is not counted against the batch size"
        )

    def part_of_an_epoch(
        self, reported: int, epoch: int | None, epoch_steps: int | None, max_epochs: int
    ) -> None:
        """Say it where the run's first report, which counts as an epoch of the job's (no
        ``epoch`` given), comes after less than three quarters of an epoch's optimizer steps
        (``epoch_steps``): a loop that validates every few steps, whose reports the job's
        ``max_epochs`` then counts, each of another number of samples at each batch size."""
        if self.part_said or epoch is not None or reported:
            return
        self.part_said = True  # judged at the run's first report only
        taken = self.steps.steps
        if epoch_steps is None or not 0 < taken < 0.75 * epoch_steps:
            return
        logger.warning(
            "zeus-bso: the run's first report came after %d optimizer steps of an epoch's %d: "
            "each report counts as one of the job's epochs, so its max_epochs (%d) counts "
            "reports, and the server judges each batch size by reports of another number of "
            "samples: report once an epoch, after its last step, or every bso.steps_for(N) "
            "steps (the samples of N steps at the reference batch size, at every size)",
            taken,
            epoch_steps,
            max_epochs,
        )
