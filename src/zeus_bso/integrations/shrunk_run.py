"""After an out-of-memory error the framework trains again at a smaller size of its own (the HF
Trainer's ``auto_find_batch_size``, Accelerate's ``find_executable_batch_size``): a run outside
the optimizer (`ShrunkRun`)."""

from __future__ import annotations

import dataclasses
import logging

from zeus_bso.spec import JobSpec
from zeus_bso.training import RunOutcome, TrialSession
from zeus_bso.training.unjudged import judged_without_server


class ShrunkRun:
    """What an adapter knows of the sizes its framework trained at: the size it trained at
    (`trained_at`, to see a shrink), and after a shrink the size it went on at (`size`) with
    the evaluations since, which `judge` stops at the job's target or ``max_epochs``. ``who``
    trains (``the Trainer``), in words; ``logger``: the adapter's."""

    def __init__(self, job: JobSpec, metric: str, who: str, logger: logging.Logger) -> None:
        self.job = job
        self.metric = metric
        self.who = who
        self.logger = logger
        self.trained_at: int | None = None  # the framework's batch (the HF Trainer's: all of
        # this process's devices)
        self.size: int | None = None  # per device, while the run goes on outside the optimizer
        self.evaluations = 0
        self.outside = False  # the run went on outside the optimizer (`went_on`)
        self.converged = False  # the run outside the optimizer reached the target (`judge`)
        self._said = False

    def shrank(self, train_batch_size: int) -> int | None:
        """At the start of the Trainer's (next) training: the size it trained at before where
        it now trains at ``train_batch_size``, a smaller one; None at its first start."""
        before, self.trained_at = self.trained_at, train_batch_size
        return before if before is not None and train_batch_size < before else None

    def went_on(
        self, session: TrialSession, trial_ended: bool, old: int, new: int, why: str
    ) -> None:
        """The framework caught an out-of-memory error at ``old`` (a process's batch) and
        trains again at ``new`` (``why``, in words). The first time (the trial not
        ``trial_ended``), the trial's batch size ran out of memory: it is ``infeasible`` on
        these GPUs (the server dispatches neither it nor a larger size there again); later, a
        size of the framework's ran out too: the server's memory cap of these GPUs comes down to
        it. The run goes on outside the optimizer: not measured, reported or stopped by the
        server, but at the job's target or ``max_epochs`` (`judge`); the adapter has its
        learning rate follow ``new`` by the ``lr_rule``."""
        self.size, self.evaluations, self.outside = new, 0, True
        if not trial_ended:  # the trial's size ran out of memory as it trained
            session.end_out_of_memory(why, goes_on=True)
        elif old < session.micro_batch_size:
            session.smaller_size_out_of_memory(old, why)
        if not session.is_main:
            return
        if not self._said:
            self._said = True
            self.logger.warning(
                "zeus-bso: %s, a size the optimizer did not choose: this run goes on outside "
                "the optimizer (not measured or reported; it stops at the job's target or "
                "max_epochs), and the next run gets a batch size that fits on these GPUs",
                why,
            )
        else:  # each shrink after the first: one line (a real GPU's run shrank twelve times)
            self.logger.warning(
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
        self.size, self.converged = None, answer.converged
        if answer.converged and outcome is not None:  # a model is delivered after all
            outcome = dataclasses.replace(
                outcome,
                converged=True,
                why=f"{outcome.why}; {self.who} went on at {size}, outside the optimizer, "
                f"and reached the target at its evaluation {self.evaluations}",
            )
        if is_main:
            self.logger.warning(
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
