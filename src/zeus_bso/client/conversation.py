"""`JobConversation`: what one run says to the server, and what it hears back.

The main process of a run (global rank 0) holds one: it registers the job, asks for a trial
(or, when the server cannot be reached at start, trains without it, at the job's default
batch size or the last recommendation this machine saw), reports each validation (keeping a
report the server cannot take now for the end of the run, and then for the outbox), says when a
batch size ran out of memory, sends a power profile, keeps the trial's lease with a heartbeat,
and ends or releases the trial. What the run does with the answers (its batch size, memory
check, power limits, outcome) is the training session's (`zeus_bso.training`).
"""

from __future__ import annotations

import logging

from zeus_bso.client import fallback, outbox
from zeus_bso.client.heartbeat import Heartbeat
from zeus_bso.client.http import ServerClient
from zeus_bso.client.kept_settings import unkept, unkept_notice
from zeus_bso.client.new_job import new_job_notice
from zeus_bso.client.progress import TrialProgress
from zeus_bso.client.server_away import (
    AWAY_PATIENCE,
    away_at_start,
    for_later,
    for_later_on_a_known_route,
    token_refused,
)
from zeus_bso.errors import (
    ConfigurationError,
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    UnexpectedAnswerError,
    ZeusBSOError,
)
from zeus_bso.policy.power import profiles_power
from zeus_bso.spec import (
    CreatedJob,
    DispatchedTrial,
    Extension,
    JobSpecFromClient,
    PowerMeasurement,
    PowerProfileReport,
    ReportResponse,
    TrainingResult,
    TrialId,
    TrialStatus,
    gpu_of,
    profile_key,
)

logger = logging.getLogger(__name__)


class JobConversation:
    """One run's conversation with the server about its job and its trial.

    Args:
        client: the HTTP session to the server.
        spec: the job, with its id and its GPUs.
        run_key: the run's name, the same across its restarts (None: it has none).
        on_server_unavailable: ``"fallback"`` (train without the server when it cannot be
            reached at start) or ``"raise"``.
        id_from_settings: whether the job's id was hashed from its settings (a new one then
            names the settings that changed since the job's last id).
        heartbeat_seconds: how often the trial's lease is renewed while it trains (0: never).
    """

    def __init__(
        self,
        client: ServerClient,
        spec: JobSpecFromClient,
        *,
        run_key: str | None,
        on_server_unavailable: str,
        id_from_settings: bool,
        heartbeat_seconds: float,
    ) -> None:
        self.client = client
        self.spec = spec
        self.job_id: str = spec.job_id or ""
        self.gpu = gpu_of(spec)
        """The GPUs of the run (its hardware profile), sent with every dispatch."""
        self.run_key = run_key
        self.job: CreatedJob | None = None
        """The job as the server registered it (after `register`)."""
        self.offline = False
        """Whether the run trains without the server (it could not be reached at start)."""
        self.offline_batch_size: int | None = None
        self.answer: ReportResponse | None = None
        """The server's latest answer to a report (or the run's own judgement, offline)."""
        self.training_finished = False
        """Whether the server said stop (the run converged, or will not)."""
        self.converged = False
        """Whether the run reached its target (after the server's stop)."""
        self.pending: TrainingResult | None = None
        """A report the server could not take yet: delivered at the end, or kept for later."""
        self.memory_cap: int | None = None
        """The largest micro-batch known to fit on these GPUs (None: no cap)."""
        self.power_limit: float | None = None
        """The GPU power limit the server says to train at (W)."""
        self.power_profiling = False
        """Whether the server asks the run to profile the power limits first."""
        self.server_chooses_power = False
        """Whether the server chooses power limits (upstream Zeus's server, or an older one,
        does not: the GPUs then keep their own)."""
        self.next_refused = False
        """Whether the server said the job's next run is refused (`next_run`)."""
        self._on_server_unavailable = on_server_unavailable
        self._id_from_settings = id_from_settings
        self.heartbeat = Heartbeat(
            client,
            heartbeat_seconds,
            declared=lambda: self._declares(Extension.HEARTBEAT),
            finished=lambda: self.training_finished,
        )
        """Keeps the trial's lease while the run trains (`Heartbeat.start`, after training
        began; nothing offline); its ``on_lost`` is called when the trial is no longer the
        run's."""

    def register(self) -> CreatedJob:
        """Register the job (once; a registered job is found)."""
        if self.job is None:
            self.job, created = self.client.register_job(self.spec)
            logger.info("job %s %s", self.job.job_id, "registered" if created else "found")
            if dropped := unkept(self.spec, self.job, created):
                logger.warning("%s", unkept_notice(self.job.job_id, dropped))
            if created and self._id_from_settings:
                notice = new_job_notice(self.client, self.spec)
                if notice is not None:
                    logger.warning("%s", notice)
        return self.job

    def go_offline(self, err: ZeusBSOError, batch_size: int | None = None) -> int:
        """Train without the server, at ``batch_size`` (a checkpoint's) or the fallback, when
        the server is away at start; else raise ``err``. Returns the batch size."""
        if not away_at_start(err) or self._on_server_unavailable == "raise":
            raise err
        saved = fallback.recalled(self.job_id)
        size = batch_size or saved or self.spec.default_batch_size
        source = (
            "the checkpoint's"
            if batch_size
            else fallback.recalled_why(self.job_id)
            if saved
            else "the job's default"
        )
        self.offline, self.offline_batch_size = True, size
        logger.warning(
            "zeus-bso: the server could not be reached at start (%s); training at batch size "
            "%d, %s, without the server (nothing is reported; pass "
            "on_server_unavailable='raise' to fail instead)",
            err,
            size,
            source,
        )
        return size

    def dispatch(
        self, *, accumulate: bool, power_limits: bool, deliver: bool
    ) -> DispatchedTrial | None:
        """Register the job, deliver what earlier runs kept, and ask for this run's trial
        (None: the server is away, and the run trains without it: `go_offline`)."""
        try:
            job = self.register()
            outbox.deliver(self.client)  # what earlier runs could not say, first
            dispatched = self.client.dispatch(
                job.job_id,
                self.gpu,
                self.run_key,
                accumulate=accumulate,
                power_limits=power_limits,
                deliver=deliver,
            )
        except (ServerConnectionError, ServerRejectedError) as err:
            self.go_offline(err)
            return None
        self.memory_cap = dispatched.memory_cap
        self.power_limit = dispatched.power_limit
        self.power_profiling = dispatched.power_profiling
        # Declared by the server; a zeus-bso server from before the declaration says it by
        # answering power_profiling to a run that opted in (upstream's never does).
        self.server_chooses_power = self._declares(Extension.POWER_LIMITS) or (
            "power_profiling" in dispatched.model_fields_set
        )
        if power_limits and not self.server_chooses_power:
            logger.warning(
                "zeus-bso: the server at %s does not choose GPU power limits (upstream "
                "Zeus's server, or a zeus-bso server older than power limits): this run's "
                "GPUs keep their own; upgrade the server for power_limit='optimize'",
                self.client.shown_url,
            )
        return dispatched

    def resume(self, trial: TrialId, progress: TrialProgress, *, power_limits: bool) -> bool:
        """Go on with a trial resumed from a checkpoint: register the job, catch up with what
        the server has of the trial, and read its power limit. False: the server is away, and
        the run trains without it (`go_offline`).

        Raises:
            ConfigurationError: the trial ended with its final report."""
        try:
            self.register()
        except (ServerConnectionError, ServerRejectedError) as err:
            self.go_offline(err, trial.batch_size)
            return False
        self._caught_up(trial, progress)
        if power_limits:
            self._resumed_power(trial)
        return True

    def _caught_up(self, trial: TrialId, progress: TrialProgress) -> None:
        """Take what the server has of a trial resumed from a checkpoint: a run killed after a
        report and before its next checkpoint left the server ahead of it (the heartbeat answers
        the trial as it is, renews its lease and says the run resumed; upstream's server has
        none, and is not asked).

        Raises:
            ConfigurationError: the trial ended with its final report."""
        try:
            seen = self.client.heartbeat(trial, resumed=True)
        except RouteMissingError:
            return
        except (ServerConnectionError, ServerRejectedError, UnexpectedAnswerError) as err:
            logger.warning("zeus-bso: resumed trial %d not read (%s)", trial.trial_number, err)
            return
        if seen.status is TrialStatus.REPORTED:  # the server takes no report of it any more
            how = "reached the target" if seen.converged else "was stopped"
            raise ConfigurationError(
                f"the checkpoint is of trial {trial.trial_number} of job {trial.job_id}, which "
                f"ended with its final report: it {how} at epoch {seen.epochs}. Nothing a "
                "resumed run reports would count, so it is not resumed: a restart after that "
                "run ended has nothing left to train. Where this is the job's next recurrence, "
                "the checkpoint is the last run's, left in a checkpoint folder every run shares "
                '(ckpt_path="last", resume_from_checkpoint=True): a recurrence trains a fresh '
                "model, so give each run a folder of its own, or remove the checkpoints of a "
                "run that ended; resuming then continues only a run that was interrupted. To "
                "train on from its weights as a new run, load them without resuming "
                "(Lightning: Model.load_from_checkpoint(path) and fit without ckpt_path; HF: "
                "the model from the checkpoint, and no resume_from_checkpoint)"
            )
        epochs, checkpoint = seen.epochs or 0, progress.epochs
        if progress.caught_up(epochs, seen.time or 0.0, seen.energy or 0.0):
            logger.warning(
                "zeus-bso: the checkpoint of trial %d is from epoch %d, and %d epochs were "
                "reported before the restart: the work after the checkpoint was lost, and its "
                "time and energy count; the epochs trained again are reported as epoch %d",
                trial.trial_number,
                checkpoint,
                epochs,
                epochs,
            )

    def _resumed_power(self, trial: TrialId) -> None:
        """A run resumed from a checkpoint is not dispatched again: the limit its batch size
        trains at on these GPUs comes from the job's power profiles (the read API); without
        one yet (the run stopped before its profile was sent), it profiles, as the server would
        have said."""
        try:
            profiles = self.client.job(self.job_id, limit=1).power_profiles
        except (ServerConnectionError, ServerRejectedError, UnexpectedAnswerError) as err:
            logger.warning(
                "zeus-bso: the power limit of resumed trial %d is not known (%s): its GPUs "
                "keep their own",
                trial.trial_number,
                err,
            )
            return
        self.server_chooses_power = True
        key = profile_key(self.gpu)
        for found in profiles:
            if found.profile == key and found.batch_size == trial.batch_size:
                self.power_limit = found.power_limit
                return
        job = self.job
        self.power_profiling = job is not None and profiles_power(job.eta_knob, job.power_profiling)

    def report(self, result: TrainingResult) -> ReportResponse:
        """Report a validation; the server's answer. A server away for now (unreachable, a 5xx,
        a reverse proxy's own 404: `for_later_on_a_known_route`) says nothing about the report:
        it is kept for the end of the run (`pending`), training goes on, and the next report
        waits on the server at most `AWAY_PATIENCE`.

        Raises:
            ZeusBSOError: the server refused the report (a 4xx)."""
        patience = None if self.pending is None else AWAY_PATIENCE
        try:
            answer = self.client.report(result, patience)
        except (ServerConnectionError, ServerRejectedError) as err:
            if not for_later_on_a_known_route(err):
                raise
            self.pending = result
            if token_refused(err):
                logger.warning(
                    "zeus-bso: report of epoch %d not delivered: the server refuses the token it "
                    "took when this run started (rotated? ZEUS_BSO_PREVIOUS_TOKEN on the server "
                    "keeps the old one open while runs end); the run trains on without the "
                    "server's stop, and its last report is kept for a run with the new token",
                    result.current_epoch,
                )
            else:
                logger.warning(
                    "report of epoch %d not delivered, will retry: %s", result.current_epoch, err
                )
            return ReportResponse(stop_train=False, converged=False, message=str(err))
        self.pending = None
        self.answered(answer)
        if answer.stop_train:
            logger.info("trial %d done: %s", result.trial_number, answer.message)
        return answer

    def trial_gone(self, err: ZeusBSOError, trial: TrialId) -> bool:
        """Whether ``err``, a request of this run under way refused as naming no job or trial
        (400, as upstream's protocol answers it, or 404), came because ``trial`` is no longer
        on the server: its job was deleted while the run trained (``zeus-bso jobs delete``), or
        the database was restored from before the trial. Asked of the trial's heartbeat, which
        answers 404 for it (upstream's server has none: False)."""
        if not (isinstance(err, ServerRejectedError) and err.status in (400, 404)):
            return False
        try:
            self.client.heartbeat(trial)
        except RouteMissingError:
            return False
        except ServerRejectedError as asked:
            return asked.status == 404
        except ZeusBSOError:
            return False
        return False

    def lost_trial(self, trial: TrialId) -> None:
        """``trial`` is no longer on the server (`trial_gone`): the run trains on without the
        server at its batch size (offline from now on: nothing more is sent, and its end is not
        kept for later)."""
        self.offline, self.offline_batch_size = True, trial.batch_size
        self.heartbeat.stop()
        logger.warning(
            "zeus-bso: trial %d of job %s is no longer on the server (the job was deleted while "
            "this run trained, or the database restored from before the trial): the run trains "
            "on without the server, to the job's target or max_epochs, and reports nothing more",
            trial.trial_number,
            trial.job_id,
        )

    def answered(self, answer: ReportResponse) -> None:
        """Keep the latest answer, and the server's stop if it says so."""
        self.answer = answer
        if answer.stop_train:
            self.training_finished, self.converged = True, answer.converged

    def ran_out_of_memory_here(self, batch_size: int) -> None:
        """``batch_size`` ran out of memory on this machine: a later run that cannot reach the
        server does not fall back to it (`zeus_bso.client.fallback.ran_out_of_memory`)."""
        spec = self.spec
        fallback.ran_out_of_memory(
            self.job_id, batch_size, spec.batch_sizes, spec.default_batch_size
        )

    def infeasible(self, trial: TrialId, trains_on: str, why: str | None) -> bool:
        """Tell the server that ``trial``'s batch size ran out of memory; whether it heard, or
        will: where the server is away for now, the mark is kept on this machine and the next
        run that reaches the server delivers it before it asks for its batch size
        (`zeus_bso.client.outbox`), which then fits. It waits on the server at most
        `AWAY_PATIENCE`: the run's other processes, which ran out too, wait for this one before
        they start the next attempt together (`zeus_bso.client.every_rank`, 30 s), and a
        server that hung held it the client's whole timeout and retries."""
        try:
            self.client.infeasible(trial, patience=AWAY_PATIENCE)
        except ZeusBSOError as err:
            if self._lacks(err, Extension.INFEASIBLE):
                logger.info("the server has no infeasible route (upstream Zeus?): trial ended")
                self.client.end_trial(trial)
                return False
            what = f"batch size {trial.batch_size} ran out of memory on {trains_on}"
            if self._kept_for_later(err, trial, what, infeasible=True):
                return True
            logger.warning("could not mark trial %s infeasible: %s", trial, err)
            return False
        logger.warning(
            "zeus-bso: batch size %d ran out of memory on %s%s: not dispatched there again",
            trial.batch_size,
            trains_on,
            f" ({why})" if why else "",
        )
        return True

    def micro_batch_infeasible(self, trial: TrialId, micro: int) -> bool:
        """Tell the server that micro-batches of ``micro`` ran out of memory in ``trial`` (its
        memory cap of these GPUs comes down); whether it heard, or will: where the server is
        away for now, the mark is kept on this machine for the next run that reaches it
        (`zeus_bso.client.outbox`; a warning says so, or that it was lost); it waits on the
        server at most `AWAY_PATIENCE`, as a report does, while the run trains on."""
        try:
            self.client.infeasible(trial, micro_batch_size=micro, patience=AWAY_PATIENCE)
        except ZeusBSOError as err:
            what = f"micro-batches of {micro} ran out of memory"
            if self._kept_for_later(err, trial, what, micro_batch_size=micro):
                return True
            logger.warning("could not tell the server that %d ran out of memory: %s", micro, err)
            return False
        return True

    def _kept_for_later(
        self,
        err: ZeusBSOError,
        trial: TrialId,
        what: str,
        *,
        infeasible: bool = False,
        micro_batch_size: int | None = None,
    ) -> bool:
        """Keep an out-of-memory mark the server could not take now (``err``: it is away,
        answered 5xx, or a reverse proxy's page answered the route it declared) in the outbox,
        saying ``what`` in a warning; whether it was kept. A server that did not declare the
        route at dispatch (upstream's) could not take the mark later either: none is kept, and
        the trial is ended as upstream's runs end (`finish`; kept for later if need be)."""
        if not self._for_later_on(err, Extension.INFEASIBLE) or not outbox.keep(
            self.client.server_url,
            trial,
            None,
            end=False,
            infeasible=infeasible,
            micro_batch_size=micro_batch_size,
        ):
            return False
        logger.warning(
            "zeus-bso: %s and the server could not be reached (%s): kept on this machine and "
            "delivered by the next run that reaches the server%s",
            what,
            err,
            ", which then gets a batch size that fits" if infeasible else "",
        )
        return True

    @property
    def knows_memory(self) -> bool:
        """Whether the server says if a size ran on these GPUs before (``memory_unknown``:
        `Extension.MEMORY`, declared at dispatch); upstream Zeus's server says nothing."""
        return self._declares(Extension.MEMORY)

    def _declares(self, extension: Extension) -> bool:
        """Whether the server declared ``extension`` at dispatch (`EXTENSIONS_HEADER`): a page
        not the server's that answers its route 404 is then a reverse proxy's, whose routes
        changed under the run, not a server without the route (upstream's)."""
        return extension in self.client.extensions

    def _lacks(self, err: ZeusBSOError, extension: Extension) -> bool:
        """Whether ``err`` says that the server has no route for ``extension``: a page not its
        own answered one it did not declare at dispatch (upstream's server)."""
        return isinstance(err, RouteMissingError) and not self._declares(extension)

    def _for_later_on(self, err: ZeusBSOError, extension: Extension) -> bool:
        """Whether what ``err`` refused on the route of ``extension`` is kept for later: the
        server declared the route, and `for_later_on_a_known_route` holds."""
        return self._declares(extension) and for_later_on_a_known_route(err)

    def release(
        self, trial: TrialId, why: str | None = None, *, out_of_memory: bool = False
    ) -> bool:
        """Release ``trial``, which counts nothing against its batch size (``why``: for the server
        to keep with it; ``out_of_memory``: `zeus_bso.spec.ReleasedTrial`'s); whether the server
        did, or will: where it is away for now (or a reverse proxy's page answers the route it
        declared), the release is kept on this machine for the next run that reaches it
        (`zeus_bso.client.outbox`); a warning says why not otherwise. It waits on the server at most
        `AWAY_PATIENCE`: a run released as it is interrupted (a preemption's SIGTERM, with its grace
        period before the SIGKILL) has the script's own ending to make (its checkpoint), which a
        server that hangs held for the client's whole timeout."""
        try:
            self.client.release(trial, why, AWAY_PATIENCE, out_of_memory=out_of_memory)
        except ZeusBSOError as err:
            if self._lacks(err, Extension.RELEASE):
                logger.info("the server has no release route (upstream Zeus?): trial left open")
                return False
            if self._for_later_on(err, Extension.RELEASE) and outbox.keep(
                self.client.server_url,
                trial,
                None,
                end=False,
                release=why or "",
                out_of_memory=out_of_memory,
            ):
                logger.warning(
                    "zeus-bso: trial %d could not be released now (%s): its release is kept on "
                    "this machine and delivered by the next run that reaches the server",
                    trial.trial_number,
                    err,
                )
                return True
            logger.warning("could not release trial %s: %s", trial, err)
            return False
        return True

    def power_profile(
        self,
        trial: TrialId,
        measurements: list[PowerMeasurement],
        limit_range_w: tuple[float, float] | None,
    ) -> float | None:
        """Send a power profile, waiting at most `AWAY_PATIENCE`; the limit to train at (None:
        the server could not take it, said in a warning)."""
        report = PowerProfileReport(
            **trial.model_dump(), measurements=measurements, limit_range_w=limit_range_w
        )
        try:
            chosen = self.client.power_profile(report, AWAY_PATIENCE)
        except ZeusBSOError as err:
            logger.warning("zeus-bso: the power profile could not be sent: %s", err)
            return None
        self.power_limit, self.power_profiling = chosen.power_limit, False
        return chosen.power_limit

    def finish(
        self, trial: TrialId | None, *, end_trial: bool, deliver: bool, why: str | None = None
    ) -> None:
        """Stop the heartbeat; deliver the pending report (``deliver``) and end ``trial``
        (``end_trial``; ``why`` it ended, for the server to keep with it). What the server
        cannot take now is kept on this machine for the next run that reaches it
        (`zeus_bso.client.outbox`; without ``why``). Where the server did not take the run's
        last report, each waits on it at most `AWAY_PATIENCE`, as the run's reports did: what
        it cannot take is kept, and a script on a server that hangs ends in seconds."""
        self.heartbeat.stop()
        if trial is None or self.offline:
            return
        patience = None if self.pending is None else AWAY_PATIENCE
        pending = self.pending if deliver else None
        if pending is not None:
            report = pending
            try:
                self.answered(self.client.report(report, patience))
                pending = None
            except ZeusBSOError as err:
                if not for_later_on_a_known_route(err):
                    logger.error(
                        "the last report could not be delivered and is lost: %s (%s)",
                        report.model_dump_json(),
                        err,
                    )
                    pending = None
        ended = not end_trial
        if end_trial and pending is None:  # a report kept for later goes first
            try:
                self.client.end_trial(trial, why, patience)
                ended = True
            except ZeusBSOError as err:
                if not for_later(err):
                    logger.warning("could not end trial %s: %s", trial, err)
                    ended = True
        if (pending is not None or not ended) and outbox.keep(
            self.client.server_url, trial, pending, end=end_trial
        ):
            logger.warning(
                "zeus-bso: the server could not be reached as trial %d ended; its %s kept "
                "on this machine and delivered by the next run that reaches the server",
                trial.trial_number,
                "last report is" if pending is not None else "end is",
            )

    def next_run(self) -> str | None:
        """What the server says the job's next run gets, in words (None where it cannot say);
        the recommended batch size is remembered on this machine for a run that cannot reach
        the server."""
        if self.job is None or self.offline:
            return None
        try:
            state = self.client.job(self.job_id, limit=0, patience=AWAY_PATIENCE)  # words only
        except ZeusBSOError:
            return None  # upstream Zeus's server, or a server that went away
        if state.recommended is not None:
            fallback.remember(self.job_id, state.recommended.batch_size)
        upcoming = state.next_run
        if upcoming is None:
            return None
        if upcoming.refused:
            why = upcoming.why.removeprefix("refused: ")  # an older server's words
            self.next_refused = True
            return f"refused: {why}"
        size = upcoming.batch_size
        return f"{size} ({upcoming.why})" if size is not None else upcoming.why
