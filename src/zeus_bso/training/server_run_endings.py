"""`ServerRunEndings`: what the main process's side of a run knows of its trial (the base of
`zeus_bso.training.server_run.ServerRun`), and each way the run ends: the server told (its
trial ended, released, marked infeasible or left open for a restart), the outcome set and its
line shown."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from zeus_bso import exits
from zeus_bso.client import failure
from zeus_bso.client.accumulation import Accumulation, plan
from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.http import ending_words
from zeus_bso.client.memory import out_of_memory
from zeus_bso.client.outcome import RunOutcome
from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.client.sigterm import SigtermGuard
from zeus_bso.errors import OperationOrderError, ZeusBSOError
from zeus_bso.spec import (
    CreatedJob,
    Extension,
    JobSpecFromClient,
    ReportResponse,
    StopReason,
    TrainingResult,
    TrialId,
)
from zeus_bso.training import open_runs

logger = logging.getLogger(__name__)


class ServerRunEndings:
    """The trial a run's main process holds, as the server gave it, and how the run ends (the
    base of `zeus_bso.training.server_run.ServerRun`, which sets what it reads)."""

    link: JobConversation
    spec: JobSpecFromClient
    job_id: str
    run_key: str | None
    progress: TrialProgress
    max_micro_batch_size: int | None
    outcome: RunOutcome | None
    _show: Callable[[str], None] | None
    _sigterm: SigtermGuard
    _sigterm_exceptions: failure.SigtermExceptions
    _trains_on: str
    _on_end: Callable[[], None]
    _fit_before: bool
    _reported: Elapsed | None
    _last_report: TrainingResult | None
    _final: Elapsed | None
    _ended: bool
    _stopped_why: str | None
    _script_to_change: bool
    """Whether the run ended on what the script must change (out of memory in evaluation)."""
    waited: float
    shared_gpus: tuple[str, ...]

    @property
    def job(self) -> CreatedJob | None:
        """The job as the server registered it (from `dispatch` or `resume` on)."""
        return self.link.job

    @property
    def offline(self) -> bool:
        """Whether the run trains without the server (it could not be reached at start)."""
        return self.link.offline

    @property
    def training_finished(self) -> bool:
        """Whether the server said stop (the run converged, or will not)."""
        return self.link.training_finished

    @property
    def converged(self) -> bool:
        """Whether the run reached its target (after the server's stop)."""
        return self.link.converged

    @property
    def trial(self) -> TrialId | None:
        """This run's trial (after `dispatch` or `resume`; None while offline)."""
        return self.progress.trial

    @property
    def batch_size(self) -> int | None:
        """The batch size of this run (after `dispatch`)."""
        if self.offline:
            return self.link.offline_batch_size
        return self.trial.batch_size if self.trial else None

    @property
    def trial_number(self) -> int | None:
        """The trial number of this run (None while offline)."""
        return self.trial.trial_number if self.trial else None

    @property
    def accumulation(self) -> Accumulation:
        """How this run trains its batch size: with ``max_micro_batch_size`` set, a batch size
        above it, or at or above the smallest that ran out of memory on these GPUs, is trained
        as micro-batches whose gradients accumulate before each optimizer step (the batch per
        step is the server's). Without, one micro-batch of the whole batch."""
        size = self.batch_size
        if size is None:
            raise OperationOrderError("call get_batch_size() before reading the accumulation")
        return plan(size, self.max_micro_batch_size, self.link.memory_cap)

    def end(self, *, end_trial: bool = True, why: str | None = None) -> None:
        """End the trial: deliver an undelivered report, then tell the server the run is over;
        then say how the run went (`outcome`, and a line through ``show``).

        ``end_trial=False`` leaves the trial open for a restart that continues it (with the
        same run key) instead; its reports are delivered. Without a run key nothing can
        continue it, so a trial that has no report yet is released (nothing is charged to its
        batch size), and one with reports is left to its lease. ``why``: for a run that ended
        before the server said stop, the reason in words (e.g. the framework's own epoch limit).
        """
        if end_trial and self._sigterm.received and not self.training_finished:
            self.end_interrupted("SIGTERM")  # a handler of the script's own stopped it
            return
        unreported = self._reported is None and self.link.pending is None
        if not end_trial and self.run_key is None and unreported and self.trial is not None:
            self.release(why or "ended with end_trial=False before any report")
            return
        early = why or self._stopped_why or "training ended before it was told to stop"
        self._finish(end_trial=end_trial, deliver=True, why=early)
        if self.outcome is None:  # a pending report delivered may have finished the training
            if self.training_finished:
                self._conclude(None, None)
            else:
                self._conclude(StopReason.ENDED_EARLY, early)

    def stopped_itself(self, why: str) -> None:
        """End a run that stopped of its own accord below the target after it reported (a
        framework's early stopping, ``why``): its last report goes again as its final one
        (`TrainingResult.final`), and the server counts the run as not converging at its batch
        size. A server that does not know that report (upstream Zeus's), or a run that has not
        reported, ends as `end` with ``why`` ends it (the trial failed)."""
        last, answer = self._last_report, None
        if not (self._ended or self.training_finished or self.offline or last is None):
            try:
                final = {"final": True, "message": ending_words(why)}
                answer = self.link.report(last.model_copy(update=final))
            except ZeusBSOError as err:  # refused: it ends as any run that stopped early
                logger.warning("the run's final report was refused: %s", err)
        if answer is None or not answer.stop_train:
            self.end(why=why)
            return
        self._finish(end_trial=True)
        self._conclude(answer.reason, f"{why}; {answer.why}" if answer.why else why)

    def diverged(self, metric: float, epoch: int, elapsed: Elapsed) -> ReportResponse:
        """The answer to a validation whose ``metric`` is not a number (NaN, infinite) at
        ``epoch``: training diverged at its batch size (a learning rate too high for it, often),
        and the run stops there, not converged. It reports so (`TrainingResult.diverged`,
        where the server declares it), with this epoch's seconds and joules (``elapsed``), and
        the server counts the size as not converging, charged as `stopped_itself` is; to a
        server that does not declare it (upstream Zeus's), its last report goes again as its
        final one (`TrainingResult.final`). A server away for now gets it when the run ends, or
        from the next run (`JobConversation.report` keeps it). Where none can be sent (no report
        yet to a server without the extension, a run offline), the run stops all the same, and
        its end fails its trial, which counts against its batch size as a crash."""
        why = (
            f"training diverged at batch size {self.batch_size}: its metric at epoch {epoch} is "
            f"{metric} (a learning rate too high for the size? lr_rule scales it)"
        )
        self.progress.reported(elapsed.joules)
        self._reported = elapsed
        answer = None
        started = time.monotonic()
        kept = self.link.pending
        away = False
        if kept is not None and kept is self._last_report and not self.offline:
            # The report before, kept while the server was away: its metric, the run's last
            # that is a number, is the server's to take before the final report, which the
            # server ends the trial with without taking its metric.
            try:
                answer = self.link.report(kept)
            except ZeusBSOError as err:
                logger.warning("the run's last report was refused: %s", err)
            if answer is not None and answer.stop_train:
                self.waited = time.monotonic() - started
                return answer  # the server ended the trial there: the run stops
            away = answer is not None and self.link.pending is kept  # kept again
        final = self._diverged_report(why, epoch, elapsed)
        if final is not None and away:
            # Still away: the final report is kept in its stead, without a second wait.
            self.link.pending, answer = final, None
            self.waited = time.monotonic() - started
        elif final is not None:
            try:
                answer = self.link.report(final)
            except ZeusBSOError as err:  # refused: the run stops all the same
                logger.warning("the run's final report was refused: %s", err)
                answer = None
            finally:
                self.waited = time.monotonic() - started
        if answer is not None and answer.stop_train and not answer.converged:
            said = f"{why}; {answer.why}" if answer.why else why
            answer = answer.model_copy(update={"why": said})
            self.link.answered(answer)
            return answer
        self._stopped_why = why  # its end fails the trial, saying why
        return ReportResponse(
            stop_train=True,
            converged=False,
            message=why,
            reason=StopReason.ENDED_EARLY,
            why=why,
        )

    def _diverged_report(self, why: str, epoch: int, elapsed: Elapsed) -> TrainingResult | None:
        """The report that ends a run whose training diverged (`diverged`), or None where none
        can be sent."""
        trial, last = self.trial, self._last_report
        if self.offline or trial is None:
            return None
        declared = Extension.DIVERGED in self.link.client.extensions
        if last is None and not declared:
            return None
        ending = {
            "final": True,
            "diverged": True if declared else None,
            "message": ending_words(why),
            "time": elapsed.seconds,
            "energy": elapsed.joules,
            "current_epoch": self.progress.epoch_to_report(epoch),
        }
        if last is not None:
            return last.model_copy(update=ending)
        steps = self.accumulation.steps
        return TrainingResult(
            **trial.model_dump(),
            **ending,
            metric=0.0,  # not taken: the protocol asks for a number
            accumulation_steps=steps if steps > 1 else None,
        )

    def end_out_of_memory(self, why: str | None = None, *, goes_on: bool = False) -> None:
        """End a run that ran out of accelerator memory while it trained: its trial is marked
        ``infeasible`` on this hardware profile (neither its batch size nor a larger one is
        dispatched there again), and the outcome says so (``goes_on``: the framework trains on
        at a size of its own, outside the run; `RunOutcome.went_on`)."""
        if self._ended:
            return
        if self._fit_before and not goes_on and self.trial is not None and not self.offline:
            # Runs of this size reported on these GPUs before: it fit then. The error may not
            # be its doing (a leak, another process); or the run needs more memory now.
            self.release(
                f"batch size {self.batch_size} ran out of memory although it trained on "
                f"{self._trains_on} before: a leak, another process on the GPU, or a model, "
                "data or precision that needs more memory now. Not counted against it and no "
                "memory cap set; the next run of it there is tried first, and the cap is set if "
                "it runs out again" + (f" ({why})" if why else ""),
                StopReason.FAILED,
                out_of_memory=True,
            )
            return
        if self.batch_size is not None:
            self.link.ran_out_of_memory_here(self.batch_size)
        trial = self.trial
        marked = (
            trial is not None
            and not self.offline
            and self.link.infeasible(trial, self._trains_on, why)
        )
        self._finish(end_trial=not marked and self.run_key is None)
        self._conclude(
            StopReason.OUT_OF_MEMORY,
            f"batch size {self.batch_size} ran out of memory" + (f" ({why})" if why else ""),
            went_on=goes_on,
        )

    def release(
        self, why: str, reason: StopReason = StopReason.NOT_TRAINED, *, out_of_memory: bool = False
    ) -> None:
        """End a run that stopped for a reason that is not its batch size's (a misconfigured
        script, the framework's own epoch limit): its trial is released, which counts nothing
        against its batch size, and the outcome says ``reason`` and ``why`` (``out_of_memory``:
        `zeus_bso.spec.ReleasedTrial`'s)."""
        if self._ended:
            return
        trial = self.trial
        released = (
            trial is not None
            and not self.offline
            and self.link.release(trial, why, out_of_memory=out_of_memory)
        )
        self._finish(end_trial=False)
        note = "" if released or trial is None else " (its trial is left to its lease)"
        self._conclude(reason, why + note)

    def failed(self, error: BaseException, *, trained: bool) -> None:
        """End a run that raised ``error``, charging its batch size only with what it did (see
        `zeus_bso.client.failure`): out of memory ends it as infeasible (`end_out_of_memory`),
        unless it was raised in evaluation (released);
        an interruption (Ctrl-C, a SIGTERM) releases its trial, or leaves it open for the
        restart of a run with a run key (`end_interrupted`); an error that is not the batch
        size's (a usage error of ours, or any before training: ``trained`` False) releases it;
        any other fails it (`abort`)."""
        why = failure.described(error)
        if self._ended:
            return
        self._script_to_change = failure.evaluation_ran_out(error)
        if (
            self.offline
            and not self.training_finished
            and out_of_memory(error)
            and not self._script_to_change
        ):
            self.end_out_of_memory(why)  # kept here: a later run without the server falls back
            return  # below its size
        if self.training_finished or self.trial is None or self.offline:
            self.abort(why)  # the server's stop came first (or none can come): as it said
            return
        judged = failure.verdict(error, trained=trained, sigterm=self._sigterm_exceptions)
        if self._sigterm.received and judged is not failure.Verdict.OUT_OF_MEMORY:
            judged = failure.Verdict.INTERRUPTED  # e.g. a handler of the script's own exited
        failure.end_as(self, judged, why)

    def end_interrupted(self, why: str) -> None:
        """End a run interrupted from outside (``why``: Ctrl-C, a SIGTERM such as a
        preemption), which says nothing about its batch size: its trial is released, or, for a
        run with a run key, left open for the run's restart to continue."""
        if self._ended:
            return
        if self.run_key is None or self.trial is None:
            self.release(f"interrupted ({why}); not counted against it", StopReason.ENDED_EARLY)
            return
        self._finish(end_trial=False)
        self._conclude(
            StopReason.ENDED_EARLY,
            f"interrupted ({why}); the run's restart (run key {self.run_key}) continues its trial",
        )

    def superseded(self, why: str, error: BaseException | None) -> None:
        """A later run of the job started in this process while this one was open (`open_runs`):
        ended by ``error``, the one set aside since it opened (a notebook cell's), as `failed`
        judges it; else interrupted (``why``)."""
        if error is not None:
            self.failed(error, trained=self.progress.began)
        else:
            self.end_interrupted(why)

    def withdraw(self, why: str) -> None:
        """Take back this run's dispatch, which it will not train (a framework found, after
        asking, that the run resumes a checkpoint's trial instead): its trial is released, or,
        with a run key, left open for the resume to continue; no outcome is shown."""
        show, self._show = self._show, None
        try:
            self.end_interrupted(why)
        finally:
            self._show = show
        self.outcome = None

    def _at_exit(self) -> None:
        """At interpreter exit (or a ``multiprocessing`` child's end: the processes of Lightning's
        ``ddp_spawn`` and ``ddp_notebook``, where it calls no hook on errors), a run
        that did not end: after an uncaught error (`zeus_bso.exits.uncaught_error`: one
        the interpreter set aside, a script without `with`, or a framework that calls no
        hook on errors; or the one ending the child), as `failed` judges it (out of
        memory: ``infeasible``; an interruption, a usage error of ours or an error
        before training: released); else `abort`. Only here: in a long-lived process (a
        notebook, a test runner) an error of long ago stays set aside too."""
        uncaught = exits.uncaught_error()
        if uncaught is not None:
            self.failed(uncaught, trained=self.progress.began)
        else:
            self.abort()

    def abort(self, why: str | None = None) -> None:
        """End a run that is failing (an exception, or an exit without `end`).

        Without a run key the trial ends (failed, unless its final report came). With one it is
        left open for the run's restart, which continues it; if no restart comes, its lease
        runs out and it is abandoned. A run that had not trained is released (nothing of it
        is its batch size's doing).
        """
        if self._ended:
            return
        if self._sigterm.received and not self.training_finished:
            self.end_interrupted("SIGTERM")  # e.g. at exit after `Terminated`
            return
        if why is None and (self.trial is not None or self.offline) and not self.progress.began:
            self.release("the run ended before it trained")
            return
        started = self.trial is not None or self.offline
        why = why or "the run raised or exited without end()"
        self._finish(end_trial=self.run_key is None or self.training_finished, why=why)
        if not started:
            self.link.client.close()  # it never asked for a batch size: nothing to say
        elif self.training_finished:
            self._conclude(None, None)
        else:
            self._conclude(StopReason.FAILED, why)

    def _finish(
        self, *, end_trial: bool, deliver: bool | None = None, why: str | None = None
    ) -> None:
        """Stop the heartbeat and the meter; deliver a pending report (``deliver``, by default
        when the trial ends) and end the trial (``end_trial``; ``why`` it ended, for the server
        to keep with a trial whose training the server's stop did not finish)."""
        if self._ended:
            return
        self._ended = True
        open_runs.closed(self)
        self._on_end()
        self._sigterm.uninstall()
        exits.forget_at_exit(self._at_exit)  # ended: the exit hook need not keep this alive
        # The run's figures: its last report's (every rank's energy), else this process's.
        self._final = self._reported or self.progress.elapsed()
        try:
            self.link.finish(
                self.trial,
                end_trial=end_trial,
                deliver=end_trial if deliver is None else deliver,
                why=None if self.training_finished else why,
            )
        finally:
            self.progress.meter.close()

    def _conclude(
        self, reason: StopReason | None, why: str | None, *, went_on: bool = False
    ) -> None:
        """Set `outcome` (``reason`` None: the server's answer says it) and show its line."""
        if self.outcome is not None:
            return
        answer = self.link.answer
        if reason is None:
            assert answer is not None
            reason = answer.reason or (
                StopReason.CONVERGED if answer.converged else StopReason.MAX_EPOCHS
            )
            why = answer.why or answer.message
            if self._stopped_why is not None:  # its report, kept while the server was away
                why = f"{self._stopped_why}; {why}"
        elapsed = self._final if reason is not StopReason.NOT_TRAINED else None
        self.outcome = RunOutcome(
            job_id=self.job_id,
            batch_size=self.batch_size or self.spec.default_batch_size,
            trial_number=self.trial_number,
            converged=self.converged,
            reason=reason,
            why=why or "",
            epochs=self.progress.epochs,
            max_epochs=self.spec.max_epochs,
            seconds=elapsed.seconds if elapsed else 0.0,
            joules=elapsed.joules if elapsed else 0.0,
            cost=answer.cost if answer is not None else None,
            next_run=self.link.next_run(),
            next_refused=self.link.next_refused,
            offline=self.offline,
            went_on=went_on,
            accumulation_steps=self.accumulation.steps if self.batch_size is not None else 1,
            shared_gpus=self.shared_gpus,
            continued_after=self.progress.continued,
            again_as_it_is=not self._script_to_change,
        )
        self.link.client.close()
        if self._show is not None:
            self._show(self.outcome.summary())
