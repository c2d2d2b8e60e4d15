"""The HF Trainer's ``auto_find_batch_size``: after an out-of-memory error the Trainer trains
again at a smaller size of its own, a run outside the optimizer (`ShrunkRun`)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from zeus_bso.spec import JobSpec
from zeus_bso.training import RunOutcome, TrialSession
from zeus_bso.training.unjudged import judged_without_server

logger = logging.getLogger("zeus_bso.integrations.huggingface")


class ShrunkRun:
    """What the callback knows of the Trainer's sizes under ``auto_find_batch_size``: the size it
    trained at (`trained_at`, to see a shrink), and after a shrink the size it went on at
    (`size`) with the evaluations since, which `judge` stops at the job's target or
    ``max_epochs``."""

    def __init__(self, job: JobSpec, metric: str) -> None:
        self.job = job
        self.metric = metric
        self.trained_at: int | None = None  # the Trainer's batch (all of this process's devices)
        self.size: int | None = None  # per device, while the run goes on outside the optimizer
        self.evaluations = 0
        self._said = False

    def shrank(self, train_batch_size: int) -> int | None:
        """At the start of the Trainer's (next) training: the size it trained at before where
        it now trains at ``train_batch_size``, a smaller one; None at its first start."""
        before, self.trained_at = self.trained_at, train_batch_size
        return before if before is not None and train_batch_size < before else None

    def went_on(
        self,
        session: TrialSession,
        trial_ended: bool,
        devices: int,
        before: int,
        now: int,
        schedule: tuple[Any, Any],
    ) -> None:
        """The Trainer caught an out-of-memory error at ``before`` (every device of this
        process) and trains again at ``now``. The first time (the trial not ``trial_ended``),
        the trial's batch size ran out of memory: it is ``infeasible`` on these GPUs (the server
        dispatches neither it nor a larger size there again); later, a size of the Trainer's ran
        out too: the server's memory cap of these GPUs comes down to it. The run goes on outside
        the optimizer: not measured, reported or stopped by the server, but at the job's target
        or ``max_epochs`` (`judge`); its learning rate (``schedule``: the optimizer and its
        scheduler) follows the new size by the ``lr_rule``."""
        devices = max(1, devices)
        old, new = before // devices, now // devices
        why = (
            f"the Trainer's auto_find_batch_size caught an out-of-memory error at batch size "
            f"{old} and trains at {new}"
        )
        self.size, self.evaluations = new, 0
        if not trial_ended:  # the trial's size ran out of memory as it trained
            session.end_out_of_memory(why, goes_on=True)
        elif old < session.micro_batch_size:
            session.smaller_size_out_of_memory(old, why)
        optimizer, scheduler = schedule
        if session.lr.rule != "none" and optimizer is not None:
            session.lr.rescale(optimizer, new, [scheduler])
        if not session.is_main:
            return
        if not self._said:
            self._said = True
            logger.warning(
                "zeus-bso: %s, a size the optimizer did not choose: this run goes on outside "
                "the optimizer (not measured or reported; it stops at the job's target or "
                "max_epochs), and the next run gets a batch size that fits on these GPUs",
                why,
            )
        else:  # each shrink after the first: one line (a real GPU's run shrank twelve times)
            logger.warning(
                "zeus-bso: %s (outside the optimizer; no size from %d up is dispatched on these "
                "GPUs)",
                why,
                old,
            )

    def judge(
        self, metrics: dict[str, float], outcome: RunOutcome | None, is_main: bool
    ) -> tuple[bool, RunOutcome | None]:
        """An evaluation of the run that went on at the Trainer's own size, judged by the job's
        rules without a cost bound: whether training stops (at the target or at ``max_epochs``,
        where a run of the optimizer's would, instead of training on to ``num_train_epochs``),
        and the run's outcome (converged, where the target was reached). Every process has the
        same metrics (the Trainer gathers them), so all stop together."""
        size = self.size
        if size is None or self.metric not in metrics:
            return False, outcome
        self.evaluations += 1
        value = float(metrics[self.metric])
        answer = judged_without_server(self.job, size, value, self.evaluations)
        if not answer.stop_train:
            return False, outcome
        self.size = None
        if answer.converged and outcome is not None:  # a model is delivered after all
            outcome = dataclasses.replace(
                outcome,
                converged=True,
                why=f"{outcome.why}; the Trainer went on at {size}, outside the optimizer, "
                f"and reached the target at its evaluation {self.evaluations}",
            )
        if is_main:
            logger.warning(
                "zeus-bso: the run at batch size %d, outside the optimizer, %s: training stops "
                "(%s %.4g after %d evaluations)",
                size,
                f"reached the job's target {self.job.target_metric}"
                if answer.converged
                else f"trained the job's max_epochs ({self.job.max_epochs}) without its target",
                self.metric,
                value,
                self.evaluations,
            )
        return True, outcome
