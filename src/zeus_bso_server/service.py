"""What each request does: lock the job row, load its history, ask the policy, store the result.

The algorithm lives in `zeus_bso.policy`; this module only moves data between it and the store.
Each public method is one transaction: a synchronous unit of work handed to `Database.write`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial

from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.errors import ReportMismatchError
from zeus_bso.policy import Event, TrialStatus
from zeus_bso.policy import orchestration as orchestrate
from zeus_bso.spec import (
    DispatchedTrial,
    GpuConfig,
    JobSpecFromClient,
    PowerProfileReport,
    PowerProfileView,
    ReportResponse,
    TrainingResult,
    TrialId,
    profile_key,
    profile_words,
    stable_job_id,
)
from zeus_bso_server import memory_caps
from zeus_bso_server.errors import (
    JobNotFoundError,
    NothingMeasuredError,
    PinError,
    TrialNotFoundError,
)
from zeus_bso_server.mixed_models import model_changed
from zeus_bso_server.observability import Metrics
from zeus_bso_server.power_profiles import forget_profiles, store_profile, with_power
from zeus_bso_server.registration import Registered, register, registered, stored_trial
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.repository import StoredTrial
from zeus_bso_server.store.sql_store import SqlJobStore

logger = logging.getLogger(__name__)

LEASE_EPOCHS = 3.0
"""After a report, a trial's lease covers at least this many of its mean epoch times."""


def _model_notice(conn: Connection, result: TrainingResult, stored: StoredTrial) -> str | None:
    """Keep the model a report says its run trains (its parameters and precision), at the
    trial's first report that says it, and what to tell the run where the job's other runs on
    its profile trained other models (`zeus_bso_server.mixed_models`)."""
    parameters, precision = result.model_parameters, result.precision
    techniques = repo.techniques_column(result.techniques)
    number = result.trial_number
    if (
        parameters is None
        or stored.model_parameters is not None
        or not repo.note_model(conn, result.job_id, number, parameters, precision, techniques)
    ):
        return None
    models = repo.models_of(conn, [result.job_id])[result.job_id]
    run = repo.ModelRuns(stored.trial.profile, parameters, precision, 1, number, number, techniques)
    return model_changed(result.job_id, run, models)


class BatchSizeService:
    """The operations behind the HTTP routes."""

    def __init__(
        self,
        db: Database,
        lease_seconds: float,
        metrics: Metrics | None = None,
        *,
        stable_job_ids: bool = False,
    ) -> None:
        self.db = db
        self.lease_seconds = lease_seconds
        self.metrics = metrics or Metrics()
        self.stable_job_ids = stable_job_ids
        """Give a registration without an id the one of its settings (`Settings.stable_job_ids`)."""
        self._drawn_ids_said: set[str] = set()
        """The prefixes whose registration without an id was warned of."""
        self._job_queues: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @asynccontextmanager
    async def _queue(self, job_id: str) -> AsyncIterator[None]:
        """Queue this process's requests on one job before they take the job row's lock.

        Correctness comes from the database lock alone; this only keeps a process's waiting
        requests off worker threads and database connections (each would sit blocked on the
        row lock).
        """
        lock = self._job_queues.get(job_id)
        if lock is None:
            lock = self._job_queues[job_id] = asyncio.Lock()
        async with lock:
            yield

    def _lease(self, time: float | None, epochs: int | None) -> float:
        epoch_time = (time or 0.0) / epochs if epochs else 0.0
        return max(self.lease_seconds, LEASE_EPOCHS * epoch_time)

    def _trial_lease(self, trial: policy.TrialState) -> float:
        """A stored trial's lease: a report renews it (a client that reports is alive)."""
        return self._lease(trial.time, trial.epochs)

    async def register(self, spec: JobSpecFromClient) -> Registered:
        """Register a job, or confirm that an identical one exists.

        Raises:
            UnknownBanditError: the job's bandit is neither built in nor installed here.
            JobConfigMismatchError: the id exists with another configuration.
            NewJobRefusedError: the job is new and its settings or ``prior_from`` cannot make
                a working job.
        """
        policy.bandit_factory(spec.bandit)  # before anything is written
        if spec.job_id is None and self.stable_job_ids:
            spec = spec.model_copy(update={"job_id": stable_job_id(spec)})
        elif spec.job_id is None and spec.job_id_prefix not in self._drawn_ids_said:
            self._drawn_ids_said.add(spec.job_id_prefix)  # once a prefix, in each process
            logger.warning(
                "a job of prefix %s was registered without a job_id (upstream Zeus's client, as "
                "its docs give the job): it gets a new id, and a run that registers so at every "
                "recurrence learns nothing across them; give the job a fixed job_id, or start "
                "the server with ZEUS_BSO_STABLE_JOB_IDS=true",
                spec.job_id_prefix,
            )
        return await self.db.write(lambda conn: register(conn, spec))

    async def next_trial(
        self,
        job_id: str,
        run_key: str | None = None,
        gpu: GpuConfig | None = None,
        accumulates: bool = False,
        power_limits: bool = False,
        *,
        deliver: bool = False,
    ) -> DispatchedTrial:
        """Start a trial: choose its batch size and give it the next trial number.

        With a ``run_key`` (a run's name, the same across its restarts) a run that asks again
        continues its trial: the latest trial of that key is returned, with what it reported,
        if it is still open (dispatched, or abandoned); otherwise a new trial gets the key.
        With ``gpu`` the run trains on that hardware profile (the job learns it if it is new);
        without, on the profile registered last. A run that ``accumulates`` gradients may get a
        batch size at or above the profile's memory cap. A run that opted into ``power_limits``
        (and names its GPUs) is told the limit to train at, or to profile the limits first. A
        run that must ``deliver`` a model stops only at the target or ``max_epochs``.

        Raises:
            JobNotFoundError: no such job.
            NoConvergedBatchSizeError: pruning found no batch size that converges.
        """
        async with self._queue(job_id):
            trial, dispatch, expired = await self.db.write(
                lambda conn: self._next_trial(
                    conn, job_id, run_key, gpu, accumulates, power_limits, deliver
                )
            )
        # Counted once committed, so that a rolled-back request counts nothing.
        if dispatch is not None:
            stage, decided = dispatch
            self.metrics.decisions.labels(stage, decided.kind.value).inc()
            self.metrics.trials.labels(TrialStatus.DISPATCHED.value).inc()
            logger.info(
                "job %s: trial %d at batch size %d (%s)",
                job_id,
                trial.trial_number,
                trial.batch_size,
                stage if decided.kind.value == stage else f"{stage}: {decided.kind.value}",
            )
        if expired:
            self.metrics.expired_leases.inc(expired)
            self.metrics.trials.labels(TrialStatus.ABANDONED.value).inc(expired)
        return trial

    def _next_trial(
        self,
        conn: Connection,
        job_id: str,
        run_key: str | None,
        gpu: GpuConfig | None,
        accumulates: bool = False,
        power_limits: bool = False,
        deliver: bool = False,
    ) -> tuple[DispatchedTrial, tuple[str, policy.Dispatch] | None, int]:
        row, expired = repo.lock_job_expiring_leases(conn, job_id)
        job, config = registered(row, job_id)
        state = job.state
        if gpu is not None:  # a resumed run's too: it may have restarted on other GPUs
            known = policy.with_profile(config, state, gpu)
            if known != state:
                repo.set_profiles(conn, job_id, job.config, list(known.profiles.values()))
                state = known
        if run_key is not None:
            resumed = self._resume(conn, job_id, state, run_key, gpu)
            if resumed is not None:
                # Restarted on fewer GPUs, it may accumulate now; as the last attempt, deliver.
                repo.set_dispatched_for(
                    conn,
                    job_id,
                    resumed.trial_number,
                    accumulates=accumulates or None,
                    must_deliver=deliver or None,
                    resumed_at_epoch=resumed.current_epoch,
                )
                if power_limits and gpu is not None:
                    resumed = with_power(conn, config, state, resumed, profile_key(gpu))
                return resumed, None, expired
        store = SqlJobStore(conn, job_id, state, self._trial_lease, run_key)
        profile = profile_key(gpu or config)
        step = orchestrate.dispatch(
            store, config, profile, accumulates=accumulates, deliver=deliver
        )
        if step.entered_bandit:
            logger.info("job %s enters the bandit stage with arms %s", job_id, step.job.arms)
        trial = DispatchedTrial(
            job_id=job_id,
            batch_size=step.trial.batch_size,
            trial_number=step.trial.trial_number,
            memory_unknown=not step.job.fits_known(profile, step.trial.batch_size),
            memory_cap=step.job.memory_caps.get(profile),
        )
        if power_limits and gpu is not None:
            trial = with_power(conn, config, step.job, trial, profile)
        # The job's stage when it decided (a pinned job's runs are neither pruning's nor the
        # bandit's).
        return trial, (step.job.stage.value, step.dispatch), expired

    async def power_profile(self, report: PowerProfileReport) -> PowerProfileView:
        """Store what a run measured at each power limit in the first epoch of its batch size
        on its hardware profile, unless a run measured that (profile, batch size) before (the
        first profile stays), and answer the limit to train at: the one whose epoch costs least
        at the job's ``eta_knob``, priced in the profile's units.

        Raises:
            JobNotFoundError, TrialNotFoundError: no such job or trial.
            PowerProfilingOffError: the job does not profile power limits.
            ReportMismatchError: the trial's run may not send one (`check_profile_sender`).
        """
        async with self._queue(report.job_id):
            return await self.db.write(lambda conn: store_profile(conn, report))

    def _resume(
        self,
        conn: Connection,
        job_id: str,
        state: policy.JobState,
        run_key: str,
        gpu: GpuConfig | None,
    ) -> DispatchedTrial | None:
        found = repo.trial_of_run(conn, job_id, run_key)
        if found is None:
            return None
        trial = found.trial
        if trial.status not in policy.LIFECYCLE[Event.RENEW].sources:
            return None  # that run's trial is over (reported or failed): a new one starts
        lease = self._lease(trial.time, trial.epochs)
        repo.renew_lease(conn, job_id, trial.trial_number, lease)
        if gpu is not None and profile_key(gpu) != trial.profile:
            # Restarted on other GPUs: the run goes on, and ends, on them; it is priced (its
            # time at their power) and judged on that profile.
            after, there = policy.moved(state, trial, profile_key(gpu))
            SqlJobStore(conn, job_id, state).move_trial(there, after)
            logger.info(
                "run %r continues trial %d on %s", run_key, trial.trial_number, profile_key(gpu)
            )
        logger.info("run %r continues trial %d of job %s", run_key, trial.trial_number, job_id)
        return DispatchedTrial(
            job_id=job_id,
            batch_size=trial.batch_size,
            trial_number=trial.trial_number,
            resumed=True,
            current_epoch=trial.epochs or 0,
            time=trial.time or 0.0,
            energy=trial.energy or 0.0,
        )

    async def report(self, result: TrainingResult) -> ReportResponse:
        """Record a report and say whether the run stops.

        Raises:
            JobNotFoundError, TrialNotFoundError: no such job or trial.
            ReportMismatchError: the report contradicts the trial's earlier reports.
            NothingMeasuredError: the report's epochs cost nothing (nothing measured).
        """
        async with self._queue(result.job_id):
            answer, final = await self.db.write(lambda conn: self._report(conn, result))
        if final:
            self.metrics.trials.labels(TrialStatus.REPORTED.value).inc()
            logger.info(
                "job %s: trial %d at batch size %d %s after %d epoch%s, cost %.4g%s",
                result.job_id,
                result.trial_number,
                result.batch_size,
                "converged" if answer.converged else f"stopped ({answer.reason or 'unconverged'})",
                result.current_epoch,
                "" if result.current_epoch == 1 else "s",
                answer.cost if answer.cost is not None else float("nan"),
                f": {answer.why}" if answer.why else "",
            )
        return answer

    def _report(self, conn: Connection, result: TrainingResult) -> tuple[ReportResponse, bool]:
        job, config = registered(repo.get_job(conn, result.job_id, lock=True), result.job_id)
        # Read after the lock: the version the lock's previous holder committed.
        stored = repo.get_trial(conn, result.job_id, result.trial_number)
        if stored is None or stored.trial.batch_size != result.batch_size:
            raise TrialNotFoundError(f"Unknown trial {result.model_dump_json()}")
        trial = stored.trial
        if measured := _nothing_measured(result, config.eta_knob):
            raise NothingMeasuredError(
                f"trial {result.trial_number} of job {result.job_id} reported {measured} after"
                f" epoch {result.current_epoch}: its run measured nothing (an energy meter that"
                " reads 0, or a timer that never ran), and its batch size would cost nothing."
                " Report the run's cumulative time (s) and GPU energy (J) since it began;"
                " nothing was recorded"
            )
        if result.accumulation_steps is not None:
            steps = None if result.accumulation_steps == 1 else result.accumulation_steps
            trial = replace(trial, accumulation_steps=steps)
        try:
            step = orchestrate.report(
                SqlJobStore.of(conn, job, self._trial_lease),
                config,
                trial,
                time=result.time,
                energy=result.energy,
                metric=result.metric,
                current_epoch=result.current_epoch,
                final=bool(result.final or result.diverged),
                why=result.message,
                diverged=bool(result.diverged),
            )
        except ReportMismatchError as err:
            if stored.run_key is None:
                raise
            raise ReportMismatchError(f"{err}. {_shared_run_key(stored.run_key)}") from err
        if notice := _model_notice(conn, result, stored):
            logger.warning("%s", notice)  # it names the job
            return step.answer.model_copy(update={"notice": notice}), step.final
        return step.answer, step.final

    async def end_trial(self, trial_id: TrialId, why: str | None = None) -> None:
        """End a trial; one that never sent its final report becomes failed (``why``, its
        client's words, its message).

        Raises:
            TrialNotFoundError: no such trial.
        """
        if await self.db.write(lambda conn: self._end_trial(conn, trial_id, why)):
            self.metrics.trials.labels(TrialStatus.FAILED.value).inc()

    @staticmethod
    def _end_trial(conn: Connection, trial_id: TrialId, why: str | None) -> bool:
        # One conditional update of the trial's row: it needs no job lock, and a final report
        # racing with it either lands first (the trial stays reported) or after (and wins).
        failed = repo.mark_failed(
            conn, trial_id.job_id, trial_id.trial_number, trial_id.batch_size, why
        )
        if failed is None:
            raise TrialNotFoundError(f"Could not find the trial: {trial_id.model_dump_json()}")
        return failed

    async def release_trial(
        self, trial_id: TrialId, why: str | None = None, *, out_of_memory: bool = False
    ) -> StoredTrial:
        """Release an open trial whose run ended for a reason that is not its batch size's: it
        says nothing about it (``why``, its client's words, its message; ``out_of_memory``: see
        `zeus_bso_server.memory_caps.release`). Returns the trial.

        Raises:
            JobNotFoundError, TrialNotFoundError: no such job or trial.
        """
        work = partial(memory_caps.release, trial_id=trial_id, why=why, out_of_memory=out_of_memory)
        async with self._queue(trial_id.job_id):
            stored = await self.db.write(work)
        self.metrics.trials.labels(stored.trial.status.value).inc()
        return stored

    async def trial_out_of_memory(
        self, trial_id: TrialId, micro_batch_size: int | None = None
    ) -> StoredTrial:
        """The run of a trial ran out of memory at its batch size: an open trial becomes
        infeasible, and its hardware profile's memory cap comes down to that size (the policy's
        `Event.OUT_OF_MEMORY`). A run that accumulates gradients ran out at
        ``micro_batch_size``: the cap comes down to it and the trial goes on. Returns the trial.

        Raises:
            JobNotFoundError, TrialNotFoundError: no such job or trial.
        """

        def work(conn: Connection) -> tuple[StoredTrial, bool]:
            job, config = registered(
                repo.get_job(conn, trial_id.job_id, lock=True), trial_id.job_id
            )
            before = stored_trial(conn, trial_id)
            store = SqlJobStore.of(conn, job, self._trial_lease)
            if micro_batch_size is not None:
                if orchestrate.micro_batch_ran_out_of_memory(
                    store, config, before.trial, micro_batch_size
                ):
                    logger.info(
                        "job %s: micro-batches of %d ran out of memory on %s (trial %d)",
                        trial_id.job_id,
                        micro_batch_size,
                        before.trial.profile,
                        before.trial.trial_number,
                    )
                return stored_trial(conn, trial_id), False
            after = orchestrate.ran_out_of_memory(store, config, before.trial)
            if after.status is not before.trial.status:
                logger.info(
                    "job %s: batch size %d ran out of memory on %s (trial %d)",
                    trial_id.job_id,
                    after.batch_size,
                    after.profile,
                    after.trial_number,
                )
            return stored_trial(conn, trial_id), after.status is not before.trial.status

        async with self._queue(trial_id.job_id):
            stored, changed = await self.db.write(work)
        if changed:
            self.metrics.trials.labels(TrialStatus.INFEASIBLE.value).inc()
        return stored

    async def pin(self, job_id: str, batch_size: int | None) -> int:
        """Pin the job: every run gets ``batch_size`` (None: the batch size recommended now) and
        nothing is explored, until `unpin`. Pinned runs still report. Returns the batch size.

        Raises:
            JobNotFoundError: no such job.
            PinError: the job has no such batch size, it ran out of memory on the job's
                current GPUs, or there is no recommendation yet.
        """

        def work(conn: Connection) -> int:
            job, config = registered(repo.get_job(conn, job_id, lock=True), job_id)
            size = batch_size
            if size is None:
                store = SqlJobStore(conn, job_id, job.state)
                state, history = orchestrate.decision_view(store, config, job.state)
                found = policy.recommended(config, state, history)
                if found is None:
                    raise PinError(
                        f"Job {job_id} has no recommendation yet (no run converged): give the "
                        "batch size to pin"
                    )
                size = found[0]
            elif size not in config.batch_sizes:
                raise PinError(
                    f"Job {job_id} has no batch size {size}; it has "
                    f"{', '.join(map(str, config.batch_sizes))}"
                )
            profile = profile_key(config)
            cap = job.state.memory_caps.get(profile)
            if cap is not None and size >= cap:
                raise PinError(
                    f"Batch size {size} does not fit in memory on {profile_words(profile)} ({cap}"
                    " and above ran out of memory there): pin a smaller one"
                )
            repo.pin_job(conn, job_id, size)
            return size

        return await self.db.write(work)

    async def unpin(self, job_id: str) -> None:
        """Unpin the job: the optimizer chooses its runs' batch sizes again.

        Raises:
            JobNotFoundError: no such job.
        """

        def work(conn: Connection) -> None:
            registered(repo.get_job(conn, job_id, lock=True), job_id)
            repo.pin_job(conn, job_id, None)

        await self.db.write(work)

    async def forget_power_profiles(
        self, job_id: str, profile: str | None, batch_size: int | None
    ) -> list[tuple[str, int]]:
        """Forget the job's power profiles on ``profile`` of ``batch_size`` (None: every one):
        the next run at each of those batch sizes on those GPUs profiles its power limits
        again (a profile measured badly, or GPUs whose power curve changed: a new driver, other
        cooling). Runs training at a limit now keep it. Returns the (hardware profile, batch
        size) pairs forgotten.

        Raises:
            JobNotFoundError: no such job.
        """

        return await self.db.write(lambda conn: forget_profiles(conn, job_id, profile, batch_size))

    async def forget_memory_caps(
        self, job_id: str, profile: str | None
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Forget the job's memory caps and doubts on ``profile`` (None: every one): runs there
        are dispatched at every batch size again, the sizes that trained there taken to fit, and
        the next that runs out of memory sets the cap anew (an out-of-memory error that was a
        bug, now fixed; a GPU with more memory under the same name). Returns the caps and the
        doubts forgotten, by hardware profile.

        Raises:
            JobNotFoundError: no such job.
        """

        return await self.db.write(partial(memory_caps.forget_caps, job_id=job_id, profile=profile))

    async def heartbeat(self, trial_id: TrialId, *, resumed: bool = False) -> StoredTrial:
        """Renew a running trial's lease (and revive an abandoned one); ``resumed``: its run
        resumed from a checkpoint, and the epochs it reports next hold the restart's one-off
        work (`zeus_bso.policy.TrialState.restarted`). Returns the trial.

        Raises:
            TrialNotFoundError: no such trial.
        """
        return await self.db.write(lambda conn: self._heartbeat(conn, trial_id, resumed))

    def _heartbeat(self, conn: Connection, trial_id: TrialId, resumed: bool) -> StoredTrial:
        # Like ending a trial, renewing a lease touches only the trial's row.
        # renew_lease only touches an open (dispatched or abandoned) trial.
        stored = stored_trial(conn, trial_id)
        job_id, number, epochs = trial_id.job_id, trial_id.trial_number, stored.trial.epochs
        if repo.renew_lease(conn, job_id, number, self._lease(stored.trial.time, epochs)):
            if resumed:
                repo.set_dispatched_for(conn, job_id, number, resumed_at_epoch=epochs or 0)
            stored = stored_trial(conn, trial_id)
        return stored

    async def delete_job(self, job_id: str) -> None:
        """Delete a job and everything stored for it.

        Raises:
            JobNotFoundError: no such job.
        """
        await self.db.write(lambda conn: self._delete_job(conn, job_id))

    @staticmethod
    def _delete_job(conn: Connection, job_id: str) -> None:
        if not repo.lock_job_row(conn, job_id):  # its state unread: a corrupt one goes too
            raise JobNotFoundError("No job was deleted.")
        repo.delete_job(conn, job_id)
        logger.info("deleted job %s", job_id)


def _nothing_measured(result: TrainingResult, eta_knob: float) -> str | None:
    """What a report lacks where its epochs would cost nothing (``eta * energy + (1 - eta) *
    max_power * time``: the measurements the cost counts are 0), or None."""
    if result.time == 0 and result.energy == 0:
        return "no time and no energy"
    if result.energy == 0 and eta_knob == 1:
        return "no energy, and the job's cost is its energy alone (eta_knob 1),"
    if result.time == 0 and eta_knob == 0:
        return "no time, and the job's cost is its time alone (eta_knob 0),"
    return None


def _shared_run_key(run_key: str) -> str:
    """What a report that contradicts its trial's earlier ones says where a run named itself
    (``run_key``): two processes running with one name at once share its trial, and each
    reports its own totals to it."""
    return (
        f"The trial belongs to the run named {run_key!r}; if two processes run with that name "
        "at once (a fixed ZEUS_BSO_RUN_KEY or run_key=... in a sweep, or torchrun launches "
        "sharing one --rdzv-id), they share this trial and their reports contradict each "
        "other: give each run its own name (a restart of the same run keeps it)"
    )
