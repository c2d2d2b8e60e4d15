"""`RunRate`: a run's learning rate at its batch size, across a resume from a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zeus_bso.scaling.lr import LrScaling, scale_optimizer, step_factor, stepped_rate, warmup_steps
from zeus_bso.training.shared_trial import OLDER_CHECKPOINT


@dataclass
class RunRate:
    """The learning-rate rule of a run, the factor of the run a checkpoint resumed (`scale`
    keeps it), and the optimizer scaled."""

    scaling: LrScaling
    resumed_factor: float | str | None = None
    """A resumed run's factor (`zeus_bso.training.shared_trial.SharedTrial.lr_factor`)."""
    scaled: Any = None
    """The optimizer whose steps take the scaled rates (None: none yet)."""
    asked: bool = False
    """Whether the script asked for a rate at the run's batch size (``learning_rate``)."""

    def unapplied(self) -> str | None:
        """Why the run's rule has not reached its rate: it has one, but no optimizer was scaled
        and no rate asked for. None: it has, or the rule is ``none``."""
        if self.scaling.rule == "none" or self.scaled is not None or self.asked:
            return None
        return (
            f"lr_rule={self.scaling.rule!r}, but no optimizer was scaled: call "
            "bso.scale(optimizer) once the optimizer is built, before train_begin() (or build "
            "it at bso.learning_rate(base_lr)); otherwise every batch size trains at the rate "
            f"tuned at {self.scaling.reference}, and the job compares the sizes at rates that "
            "do not fit them (lr_rule='none' leaves the rate to the script); the run is not "
            "counted against the batch size"
        )

    def scale(self, optimizer: Any, batch_size: int, schedulers: tuple[Any, ...]) -> float:
        """Have ``optimizer``'s steps take its schedule's rates at ``batch_size``, or at a
        resumed run's factor; the factor."""
        if isinstance(self.resumed_factor, float):
            scale_optimizer(optimizer, self.resumed_factor)
            factor = self.resumed_factor
        elif self.resumed_factor == OLDER_CHECKPOINT and self.scaling.rule != "none":
            # A checkpoint of an earlier release, whose optimizer state holds scaled rates.
            scale_optimizer(optimizer, 1.0)
            factor = 1.0
        else:
            factor = self.scaling.scale(optimizer, batch_size, schedulers)
        self.scaled = optimizer
        return factor

    def went_on(self, optimizers: list[Any], dispatched: int, batch_size: int) -> None:
        """The loop went on at ``batch_size``, a size of its own, where the run was
        ``dispatched`` another (outside the optimizer, after out of memory): ``optimizers`` step
        at its rate by the rule. One the loop scaled (`scale`) gets the factor of
        ``batch_size``; one built at the rate the run gave the loop (``learning_rate``, the
        dispatched size's) gets the ratio of the two."""
        if self.scaling.rule == "none":
            return
        for optimizer in optimizers:
            if step_factor(optimizer) is not None:
                self.scaling.rescale(optimizer, batch_size)
            elif self.asked:
                ratio = self.scaling.factor(batch_size, optimizer)
                scale_optimizer(optimizer, ratio / self.scaling.factor(dispatched, optimizer))

    def warmup_steps(self, steps: int, batch_size: int) -> int:
        """Warm-up steps at ``batch_size`` that see the samples ``steps`` saw at the reference
        batch size (the script's own with ``lr_rule='none'``)."""
        if self.scaling.rule == "none":
            return steps
        return warmup_steps(steps, batch_size, self.scaling.reference)

    def stepped(self) -> float | None:
        """The rate the scaled optimizer's steps take (None: nothing scaled)."""
        return None if self.scaled is None else stepped_rate(self.scaled)

    def saved_factor(self) -> float | None:
        """The factor a checkpoint keeps (None: unscaled)."""
        return None if self.scaled is None else step_factor(self.scaled)
