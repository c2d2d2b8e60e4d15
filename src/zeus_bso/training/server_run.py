"""`ServerRun`: the main process's side of one run (global rank 0, or the one process of a plain
loop): its trial from the server, its memory outcomes and its reports; how it ends, and its
outcome, are its base's (`zeus_bso.training.server_run_endings`).

`zeus_bso.training.TrialSession` holds one on its main process and shares its answers with
every process; what the run trains with (the memory check, the learning rate, the power
limits, the framework's logging) is the session's. The words go through `JobConversation`
(`zeus_bso.client.conversation`).

Nothing talks to the server before `dispatch` (or `resume`). When the server cannot be reached
there, the run trains at the job's default batch size (or the last recommendation this machine
saw for the job), with a warning, unless ``on_server_unavailable="raise"``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from pydantic import ValidationError

from zeus_bso import exits
from zeus_bso.client import failure
from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.outcome import MUST_DELIVER, RunOutcome
from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.client.server_away import away_at_start
from zeus_bso.client.sigterm import SigtermGuard
from zeus_bso.errors import (
    OperationOrderError,
    OutOfMemoryNotTheBatchSizeError,
    RouteMissingError,
    ZeusBSOError,
)
from zeus_bso.options import check_reported_metric, metric_scale_warning
from zeus_bso.spec import (
    JobSpecFromClient,
    PowerMeasurement,
    ReportResponse,
    Technique,
    TrainingResult,
    TrialId,
    TrialStatus,
)
from zeus_bso.training import open_runs
from zeus_bso.training.server_run_endings import ServerRunEndings
from zeus_bso.training.trial_file import IfOpen
from zeus_bso.training.unjudged import judged_without_server

logger = logging.getLogger(__name__)


class ServerRun(ServerRunEndings):
    """The main process's side of one run: its trial, its reports, its end and its outcome.

    Args:
        link: the run's conversation with the server.
        progress: the run's trial, epochs, time and energy on this process.
        max_micro_batch_size: opts into gradient accumulation (`accumulation`).
        power_limits: ask the server for the power limit to train at (`power_limit`, or
            `power_profiling`: profile first and `send_power_profile`); the session sets the
            GPUs.
        show: where the one-line summary of the run goes at its end (None: nowhere).
        handle_sigterm: while the trial is open, SIGTERM raises
            `zeus_bso.client.failure.Terminated` in the main thread, so that the trial is
            released rather than left to its lease (`zeus_bso.client.sigterm`).
        sigterm_exceptions: what a framework that handles SIGTERM itself raises on it (an
            interruption, as `zeus_bso.client.failure.Terminated`).
        trains_on: where the run trains, in words (the GPUs' model, or this machine).
        on_end: called as the run ends, before anything is said to the server, and at exit
            (the session's GPU power limits go back).
    """

    def __init__(
        self,
        link: JobConversation,
        progress: TrialProgress,
        *,
        max_micro_batch_size: int | None,
        power_limits: bool,
        show: Callable[[str], None] | None,
        handle_sigterm: bool,
        sigterm_exceptions: failure.SigtermExceptions = (),
        trains_on: str,
        on_end: Callable[[], None],
    ) -> None:
        self.link = link
        self.spec: JobSpecFromClient = link.spec
        self.job_id = link.job_id
        self.run_key = link.run_key
        self.progress = progress
        self.max_micro_batch_size = max_micro_batch_size
        self.outcome: RunOutcome | None = None
        """How the run ended (after `end`)."""
        self.waited = 0.0
        """Seconds the latest report waited on the server (`on_evaluate`): not training."""
        self._power_limits = power_limits
        self._show = show
        self._handle_sigterm = handle_sigterm
        self._sigterm_exceptions = sigterm_exceptions
        self._trains_on = trains_on
        self._on_end = on_end
        self._fit_before = False
        self._memory_unknown = False
        self._reported: Elapsed | None = None
        self._last_report: TrainingResult | None = None
        self._final: Elapsed | None = None
        self._ended = False
        self._stopped_why: str | None = None
        """Why the run stopped below its target where no server said so (`diverged`)."""
        self._script_to_change = False
        self.model_parameters: int | None = None
        """The parameters the run trains, which its reports say (None: not counted)."""
        self.precision: str | None = None
        """The precision the run trains in, which its reports say (None: not known)."""
        self.techniques: list[Technique] | None = None
        """The ways of training it uses, which its reports say (None: not known)."""
        self.shared_gpus: tuple[str, ...] = ()
        """The run's GPUs others computed on, as the session found them (for the outcome)."""
        self._thread = threading.get_ident()
        self._sigterm = SigtermGuard()
        exits.at_exit(self._at_exit)

    def dispatch(self) -> int:
        """Register the job and ask the server for this run's batch size (once per run)."""
        if self.offline:
            assert self.link.offline_batch_size is not None
            open_runs.opened(self, self._thread)  # a later run of the job may find it over
            return self.link.offline_batch_size
        trial = self.progress.trial
        if trial is not None:
            return trial.batch_size
        open_runs.supersede(self, self._thread)
        dispatched = self.link.dispatch(
            accumulate=self.max_micro_batch_size is not None,
            power_limits=self._power_limits,
            deliver=MUST_DELIVER.get(),
        )
        if dispatched is None:  # the server is away: trains without it
            assert self.link.offline_batch_size is not None
            open_runs.opened(self, self._thread)
            return self.link.offline_batch_size
        trial = dispatched.trial
        self._opened()
        if dispatched.resumed:
            # A restart of this run: its trial goes on from what it reported.
            self.progress.go_on(trial, dispatched.current_epoch, dispatched.time, dispatched.energy)
            logger.info(
                "run %r continues trial %d of job %s after epoch %d: batch size %d",
                self.run_key,
                trial.trial_number,
                self.job_id,
                dispatched.current_epoch,
                trial.batch_size,
            )
        else:
            self.progress.trial = trial
            # Micro-batches of a size new to these GPUs are tried too.
            accumulated = self.accumulation.steps > 1
            self._memory_unknown = dispatched.memory_unknown or accumulated
            # A size known to fit here: a server that says so (upstream's says nothing).
            self._fit_before = self.link.knows_memory and not dispatched.memory_unknown
            logger.info(
                "trial %d of job %s: batch size %d",
                trial.trial_number,
                self.job_id,
                trial.batch_size,
            )
        return trial.batch_size

    def resume(self, saved: Mapping[str, Any]) -> int:
        """Continue the trial of a `checkpoint` after a restart (instead of `dispatch`).
        Returns its batch size.

        Raises:
            ConfigurationError: ``saved`` is not a checkpoint of a trial, or one that ended.
        """
        trial = self.progress.resume(saved)
        open_runs.supersede(self, self._thread)
        try:
            resumed = self.link.resume(trial, self.progress, power_limits=self._power_limits)
        except ZeusBSOError:  # e.g. its trial ended before: this run never started
            self._ended = True  # nothing to end at exit
            raise
        if not resumed:
            return trial.batch_size  # the server is away: trains without it
        self._opened()
        logger.info("trial %d of job %s resumed", trial.trial_number, self.job_id)
        return trial.batch_size

    def continues(self, saved: Mapping[str, Any], resume: object) -> bool:
        """Whether the run continues the trial ``saved`` (with `resume`) rather than asking for
        a new one: always, unless ``resume`` is `IfOpen` (a checkpoint the run found), whose
        trial it continues only where that is its job's and still open on the server (where
        not, `IfOpen.passed_over` says why, in a log line too)."""
        if not isinstance(resume, IfOpen):
            return True
        why = self._not_open(saved)
        if why is not None:
            resume.passed_over = f"{resume.checkpoint} holds {why}"
            logger.info("zeus-bso: a new trial, not the checkpoint's: %s", resume.passed_over)
        return why is None

    def _not_open(self, saved: Mapping[str, Any]) -> str | None:
        """Why the trial a checkpoint ``saved`` is not one this run may continue (None: it is
        this job's, and dispatched or abandoned on the server; or the server is away, and the
        run continues it without the server, as one given the checkpoint does)."""
        try:
            trial = TrialId.model_validate(saved.get("trial"))
        except ValidationError:
            return "no trial"
        named = f"trial {trial.trial_number} of job {trial.job_id}"
        if trial.job_id != self.link.job_id:  # the job's id, hashed from its settings or given
            return f"{named}, not this job's"
        try:
            self.link.register()
            seen = self.link.client.heartbeat(trial)  # renews an open one's lease
        except RouteMissingError:
            return f"{named}, which this server (upstream's protocol) cannot say is still open"
        except ZeusBSOError as err:  # the trial not on it (a 404), or the server away
            return None if away_at_start(err) else f"{named}, not found open ({err})"
        if seen.status not in (TrialStatus.DISPATCHED, TrialStatus.ABANDONED):
            return f"{named}, which is {seen.status}"
        return None

    def checkpoint(self) -> dict[str, Any]:
        """What a checkpoint keeps so that a restarted run continues this trial (`resume`)."""
        return self.progress.checkpoint()

    @property
    def memory_unknown(self) -> bool:
        """Whether no run of this batch size has reported on this run's hardware profile yet:
        whether it fits in memory is not known."""
        return self._memory_unknown and not self.offline and self.trial is not None

    def fits(self) -> None:
        """The memory check found that the batch size fits."""
        self._memory_unknown = False

    def out_of_memory(self, why: str | None = None) -> int:
        """The run ran out of accelerator memory at its batch size, before it trained: the
        trial is marked ``infeasible`` on this hardware profile, and a new trial starts.
        Returns its batch size.

        Raises:
            OperationOrderError: the run trains already, or has no trial (offline).
            ServerRejectedError: 409, no batch size left fits on this profile.
        """
        trial = self.trial
        if trial is None or self.offline:
            raise OperationOrderError(
                "out of memory without a trial (training without the server): lower the job's "
                "default_batch_size, or train with max_micro_batch_size"
            )
        if self.progress.began:
            raise OperationOrderError(
                "out_of_memory() is for a batch size tried before training; a run that trains "
                "already ends with end_out_of_memory()"
            )
        self.link.ran_out_of_memory_here(trial.batch_size)
        self.link.infeasible(trial, self._trains_on, why)
        self.progress.trial = None
        self._memory_unknown = False
        return self.dispatch()

    def micro_batch_out_of_memory(self, why: str | None = None) -> int:
        """Micro-batches of the accumulation's size ran out of memory before the run trained.
        A run that accumulates takes smaller micro-batches for the same batch size (the server
        lowers these GPUs' memory cap, and the trial goes on); one that does not, or whose
        micro-batch is one sample, is `out_of_memory`. Returns the new micro-batch size."""
        trial = self.trial
        micro = self.accumulation.micro_batch_size
        if self.max_micro_batch_size is None or micro == 1 or trial is None or self.offline:
            self.out_of_memory(why)
            return self.accumulation.micro_batch_size
        self.link.micro_batch_infeasible(trial, micro)
        cap = self.link.memory_cap
        self.link.memory_cap = micro if cap is None else min(cap, micro)
        accumulation = self.accumulation
        logger.warning(
            "zeus-bso: micro-batches of %d ran out of memory on %s%s: batch size %d goes on "
            "as %d micro-batches of %d",
            micro,
            self._trains_on,
            f" ({why})" if why else "",
            trial.batch_size,
            accumulation.steps,
            accumulation.micro_batch_size,
        )
        return accumulation.micro_batch_size

    def not_the_batch_size(self, why: str, size: int) -> NoReturn:
        """Even the smallest size (``size`` samples a step) ran out of memory in the memory
        check (``why``), so it is not the batch size's doing: release the trial, raise the
        error that says so.

        Raises:
            OutOfMemoryNotTheBatchSizeError: always.
        """
        message = (
            f"out of memory even at {size} sample{'s' if size > 1 else ''} a step on "
            f"{self._trains_on} ({why}): not the batch size's doing (a bug that allocates "
            "whatever the batch, another process holding the GPU's memory, a model that does "
            "not fit on this GPU, or samples too long for it: where the data holds texts "
            "of many lengths, the check tries its longest); not counted "
            "against any batch size, no memory cap set"
        )
        self.release(message)
        raise OutOfMemoryNotTheBatchSizeError(message)

    def send_power_profile(
        self,
        measurements: list[PowerMeasurement],
        limit_range_w: tuple[float, float] | None = None,
    ) -> float | None:
        """Send what this run measured at each power limit in its batch size's first epoch
        (``limit_range_w``: the lowest and highest limit its GPUs take); returns the limit to
        train at (None: the server could not take it, said in a warning)."""
        trial = self.trial
        if trial is None or self.offline:
            return None
        return self.link.power_profile(trial, measurements, limit_range_w)

    def smaller_size_out_of_memory(self, size: int, why: str | None = None) -> None:
        """After its trial ran out of memory (`end_out_of_memory`), the run went on at a
        smaller size of its framework's choosing (the HF Trainer's ``auto_find_batch_size``),
        and ``size`` ran out of memory too: the server brings these GPUs' memory cap down to it,
        so that no size from it up is dispatched there."""
        trial = self.trial
        if trial is None or self.offline:
            return
        if not self.link.micro_batch_infeasible(trial, size):
            return
        logger.info(  # the framework's own size: the framework says it shrank (a warning)
            "zeus-bso: batch size %d ran out of memory on %s too: no size from it up is "
            "dispatched there",
            size,
            self._trains_on,
        )

    def _opened(self) -> None:
        """The run's trial is open (dispatched or resumed) until `_finish`: a later run of the
        job in this thread supersedes it (`open_runs`), and SIGTERM releases it
        (``handle_sigterm``)."""
        open_runs.opened(self, self._thread)
        if self._handle_sigterm:
            self._sigterm.install()

    def train_begin(self) -> None:
        """Training began: keep the trial's lease alive while it trains."""
        if not self.link.offline:
            self.link.heartbeat.start(lambda: self.trial)

    def on_evaluate(self, metric: float, epoch: int | None, elapsed: Elapsed) -> ReportResponse:
        """Report the validation metric of the epoch just finished, with the run's seconds and
        joules since training began; says whether to stop. A report the server cannot take now
        is kept, and training goes on to the job's target or ``max_epochs``, judged here; so
        does a run offline (or once its trial is gone from the server)."""
        self.waited = 0.0
        if self.training_finished:
            return ReportResponse(
                stop_train=True, converged=self.converged, message="training already finished"
            )
        epoch = self.progress.epoch_done(epoch)
        if not math.isfinite(metric):
            return self.diverged(metric, epoch, elapsed)
        check_reported_metric(metric, self.spec, epoch - 1)  # before it is reported or judged
        if (warning := metric_scale_warning(metric, self.spec, epoch - 1)) is not None:
            logger.warning("zeus-bso: %s", warning)
        self.progress.reported(elapsed.joules)
        self._reported = elapsed
        trial = self.trial
        if self.offline or trial is None:
            return self._judged_here(self.batch_size or self.spec.default_batch_size, metric, epoch)
        steps = self.accumulation.steps
        self._last_report = TrainingResult(
            **trial.model_dump(),
            time=elapsed.seconds,
            energy=elapsed.joules,
            metric=metric,
            current_epoch=self.progress.epoch_to_report(epoch),
            accumulation_steps=steps if steps > 1 else None,
            model_parameters=self.model_parameters,
            precision=self.precision,
            techniques=self.techniques,
        )
        started = time.monotonic()
        try:
            answer = self.link.report(self._last_report)
        except ZeusBSOError as err:
            if not self.link.trial_gone(err, trial):
                raise
            self.link.lost_trial(trial)  # deleted under the run: it trains on, judged here
            return self._judged_here(trial.batch_size, metric, epoch)
        finally:
            self.waited = time.monotonic() - started
        if answer.notice:
            logger.warning("zeus-bso: %s", answer.notice)
        if self.link.pending is None or answer.stop_train:
            return answer
        # Kept for later (the server is away, or refuses the run's token): the target and
        # max_epochs are judged here, as the server would judge them, so that a run at its
        # target stops instead of training on to max_epochs until the server is back.
        here = judged_without_server(self.spec, trial.batch_size, metric, epoch)
        if here.stop_train:
            self.link.answered(here)
            return here
        return answer

    def _judged_here(self, batch_size: int, metric: float, epoch: int) -> ReportResponse:
        """A report that no server judges, judged by the job's target and ``max_epochs``."""
        answer = judged_without_server(self.spec, batch_size, metric, epoch)
        self.link.answered(answer)
        return answer
