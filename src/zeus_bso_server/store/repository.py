"""SQL for one job at a time. Every function runs inside the caller's transaction.

Each read a request needs is bounded and indexed: per-batch-size statistics (one row per batch
size), the pruning explorations (bounded by rounds x batch sizes x failures) and, with a window,
the last ``window_size`` reports per arm. The hot paths use SQLAlchemy Core statements.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias, cast

from pydantic import ValidationError
from sqlalchemy import (
    JSON,
    Double,
    Select,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.engine import Connection, Row

from zeus_bso.policy import (
    LIFECYCLE,
    BatchSizeStats,
    BestRun,
    ByProfile,
    EpochSums,
    Event,
    JobState,
    TrialKind,
    TrialState,
    TrialStatus,
)
from zeus_bso.policy.curves import as_curve
from zeus_bso.policy.power import trained_limit
from zeus_bso.policy.profiles import WindowedCosts
from zeus_bso.spec import CreatedJob, GpuConfig, PowerMeasurement, PowerProfileView, profile_key
from zeus_bso_server.errors import UnreadableJobError
from zeus_bso_server.store.dialects import dialect_of
from zeus_bso_server.store.tables import JobRow, PowerProfileRow, TrialRow, db_now

logger = logging.getLogger(__name__)

jobs = cast(Table, JobRow.__table__)
trials = cast(Table, TrialRow.__table__)
power_profiles = cast(Table, PowerProfileRow.__table__)

Record: TypeAlias = Row[Any]
"""A stored row; its columns read as attributes. Rows stay in this module: what it returns are
`StoredJob`, `StoredTrial` and `Spent`, mapped column by column."""


@dataclass(frozen=True, slots=True)
class StoredJob:
    """A job as stored: its identity, configuration and stage, the policy's state, and when it
    was created and last changed."""

    job_id: str
    job_id_prefix: str
    config: dict[str, Any]
    """The configuration as stored (JSON; validated by the service)."""
    state: JobState
    created_at: float
    updated_at: float

    @property
    def stage(self) -> str:
        """``bandit`` once the job has arms, ``pruning`` before."""
        return "pruning" if self.state.arms is None else "bandit"


@dataclass(frozen=True, slots=True)
class StoredTrial:
    """A trial as stored: the policy's view, its job, its times and its lease."""

    job_id: str
    trial: TrialState
    curve_kept: bool
    """Whether the row holds a curve (a trial stored before curves were has none)."""
    created_at: float
    updated_at: float
    lease_expires_at: float | None


@dataclass(frozen=True, slots=True)
class Spent:
    """What a job's trials of one batch size and status used: how many, and their energy and
    time (sums; unmeasured counts 0)."""

    job_id: str
    batch_size: int
    status: str
    converged: bool
    """Whether these runs reached the target (a reported run's verdict; False for the rest)."""
    runs: int
    energy: float
    time: float


def _stored_job(row: Record) -> StoredJob:
    """The job of ``row``.

    Raises:
        UnreadableJobError: its stored state cannot be read.
    """
    try:
        state = job_state(row)
        if not isinstance(row.config, dict):
            raise TypeError(f"its configuration is a {type(row.config).__name__}")
    except (TypeError, ValueError, KeyError, AttributeError, ValidationError) as err:
        raise UnreadableJobError(row.job_id, f"{type(err).__name__}: {err}") from err
    return StoredJob(
        job_id=row.job_id,
        job_id_prefix=row.job_id_prefix,
        config=row.config,
        state=state,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _readable_jobs(rows: Iterable[Record]) -> tuple[list[StoredJob], list[str]]:
    """The jobs of ``rows`` that can be read, and the ids of those that cannot (each logged)."""
    found, unreadable = [], []
    for row in rows:
        try:
            found.append(_stored_job(row))
        except UnreadableJobError as err:
            logger.error("%s", err.message)
            unreadable.append(err.job_id)
    return found, unreadable


def _stored_trial(row: Record) -> StoredTrial:
    return StoredTrial(
        job_id=row.job_id,
        trial=trial_state(row),
        curve_kept=row.curve is not None,
        created_at=row.created_at,
        updated_at=row.updated_at,
        lease_expires_at=row.lease_expires_at,
    )


def job_state(job: Record) -> JobState:
    """The policy's view of a job row."""
    per_size = (_batch_size_stats(size, values) for size, values in job.stats.items())
    return JobState(
        next_trial_number=job.next_trial_number,
        arms=tuple(job.arms) if job.arms is not None else None,
        bandit_start=job.bandit_start,
        stats={s.batch_size: s for s in sorted(per_size, key=lambda s: s.batch_size)},
        best=BestRun(job.best_batch_size, job.best_cost) if job.best_cost is not None else None,
        profiles={profile_key(g): g for g in map(GpuConfig.model_validate, job.profiles or ())},
        by_profile=_by_profile(job.by_profile) if job.by_profile is not None else None,
        pinned=job.pinned_batch_size,
        memory_caps={str(p): int(b) for p, b in (job.memory_caps or {}).items()},
    )


def _by_profile(stored: dict[str, Any]) -> ByProfile:
    epochs = {
        (str(p), int(b)): EpochSums(float(e), float(t), int(n))
        for p, b, e, t, n in stored["epochs"]
    }
    return ByProfile(epochs, {str(p): int(n) for p, n in stored["bandit_trials"].items()})


def _by_profile_json(by: ByProfile) -> dict[str, Any]:
    epochs = [[p, b, s.energy, s.time, s.trials] for (p, b), s in sorted(by.epochs.items())]
    return {"epochs": epochs, "bandit_trials": dict(sorted(by.bandit_trials.items()))}


_SET_BY_PROFILE = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(by_profile=bindparam("by_profile", type_=JSON()))
)


def set_by_profile(conn: Connection, job_id: str, by: ByProfile) -> None:
    """Store the job's epochs and bandit trials by profile."""
    conn.execute(_SET_BY_PROFILE, {"key_job_id": job_id, "by_profile": _by_profile_json(by)})


_SET_MEMORY_CAPS = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(memory_caps=bindparam("memory_caps", type_=JSON()), updated_at=db_now())
)


def set_memory_caps(conn: Connection, job_id: str, caps: dict[str, int]) -> None:
    """Store the job's memory caps by profile."""
    conn.execute(
        _SET_MEMORY_CAPS, {"key_job_id": job_id, "memory_caps": dict(sorted(caps.items()))}
    )


def trials_of(conn: Connection, job_id: str) -> list[TrialState]:
    """Every trial of the job, by number (read once, to count a job's trials by profile)."""
    stmt = select(trials).where(trials.c.job_id == job_id).order_by(trials.c.trial_number)
    return [trial_state(row) for row in conn.execute(stmt)]


def trial_state(trial: Record) -> TrialState:
    """The policy's view of a trial row (each field from its column, by name)."""
    return TrialState(
        trial_number=trial.trial_number,
        batch_size=trial.batch_size,
        kind=TrialKind(trial.kind),
        round=trial.round,
        status=TrialStatus(trial.status),
        epochs=trial.epochs,
        time=trial.time,
        energy=trial.energy,
        metric=trial.metric,
        cost=trial.cost,
        converged=trial.converged,
        message=trial.message,
        profile=trial.profile,
        curve=as_curve(trial.curve),
        accumulation_steps=trial.accumulation_steps,
        accumulates=trial.accumulates,
        power_profiling=trial.power_profiling,
        must_deliver=bool(trial.must_deliver),
    )


def _batch_size_stats(size: str, stored: dict[str, Any]) -> BatchSizeStats:
    """A batch size's statistics from the job row's ``stats`` entry (see `_stats_json`)."""
    return BatchSizeStats(
        int(size),
        reports=stored["reports"],
        mean_cost=stored["mean_cost"],
        m2_cost=stored["m2_cost"],
        converged_count=stored["converged_count"],
        converged_cost_sum=stored["converged_cost_sum"],
        best_converged_cost=stored["best_converged_cost"],
        curves=tuple(as_curve(curve) for curve in stored.get("curves", ())),
    )


def _stats_json(per_size: Iterable[BatchSizeStats]) -> dict[str, dict[str, Any]]:
    values = ((str(s.batch_size), asdict(s).items()) for s in per_size)
    return {
        size: {k: v for k, v in items if k != "batch_size" and (v or k != "curves")}
        for size, items in values
    }


def insert_job_if_absent(
    conn: Connection, job_id: str, prefix: str, config: dict[str, Any]
) -> bool:
    """Insert a job row (and its statistics rows) unless the id exists. Returns whether it did."""
    values = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "config": config,
        "next_trial_number": 1,
        "stats": _stats_json(BatchSizeStats(b) for b in config["batch_sizes"]),
    }
    return dialect_of(conn).insert_if_absent(conn, jobs, values)


# The statements every request runs are built once; only their parameters change.
_JOB = select(jobs).where(jobs.c.job_id == bindparam("job_id"))
_JOB_FOR_UPDATE = _JOB.with_for_update()
_TRIAL = select(trials).where(
    trials.c.job_id == bindparam("job_id"), trials.c.trial_number == bindparam("trial_number")
)
_EXPLORATIONS = select(trials).where(
    trials.c.job_id == bindparam("job_id"), trials.c.kind == TrialKind.EXPLORATION.value
)


def _change(event: Event) -> tuple[Any, dict[str, Any]]:
    """The WHERE clause and the SET values of ``event``'s status change (the policy's
    `LIFECYCLE`), for a set-based UPDATE of trials."""
    change = LIFECYCLE[event]
    sources = trials.c.status.in_(sorted(s.value for s in change.sources))
    return sources, {"status": change.target.value, "updated_at": db_now()}


_EXPIRES, _EXPIRED = _change(Event.EXPIRE)
_EXPIRE = (
    update(trials)
    .where(
        trials.c.job_id == bindparam("expired_job_id"),
        _EXPIRES,
        trials.c.lease_expires_at < db_now(),
    )
    .values(**_EXPIRED)
)


def get_job(conn: Connection, job_id: str, *, lock: bool = False) -> StoredJob | None:
    """The job, its row locked for the rest of the transaction when ``lock`` is set."""
    row = conn.execute(_JOB_FOR_UPDATE if lock else _JOB, {"job_id": job_id}).first()
    return _stored_job(row) if row is not None else None


def lock_job_row(conn: Connection, job_id: str) -> bool:
    """Lock the job's row for the rest of the transaction, without reading its state (a job
    whose state cannot be read can still be deleted). Returns whether it exists."""
    return conn.execute(_JOB_FOR_UPDATE, {"job_id": job_id}).first() is not None


def lock_job_expiring_leases(conn: Connection, job_id: str) -> tuple[StoredJob | None, int]:
    """Lock the job row for the rest of the transaction and mark its dispatched trials whose
    lease ran out as abandoned. Returns the job (None if there is no such job) and how many
    trials were abandoned."""
    job = get_job(conn, job_id, lock=True)
    if job is None:
        return None, 0
    return job, int(conn.execute(_EXPIRE, {"expired_job_id": job_id}).rowcount)


_ADVANCE = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(next_trial_number=bindparam("next_trial_number"), updated_at=db_now())
)
_ENTER_BANDIT = _ADVANCE.values(
    arms=bindparam("arms", type_=jobs.c.arms.type),
    bandit_start=bindparam("bandit_start"),
)


def _with_prefix(stmt: Select[Any], prefix: str | None) -> Select[Any]:
    """``stmt`` restricted to the jobs whose id starts with ``prefix`` (None: every job)."""
    if not prefix:
        return stmt
    return stmt.where(
        jobs.c.job_id.startswith(prefix, autoescape=True),  # can use the primary key's index
        # Exact: SQLite's LIKE ignores the case of ASCII letters, ids do not.
        func.substr(jobs.c.job_id, 1, len(prefix)) == prefix,
    )


def jobs_of_prefix(
    conn: Connection, job_id_prefix: str, other_than: str, limit: int
) -> list[StoredJob]:
    """The jobs registered with ``job_id_prefix`` but ``other_than``, the last changed first."""
    stmt = (
        select(jobs)
        .where(jobs.c.job_id_prefix == job_id_prefix, jobs.c.job_id != other_than)
        .order_by(jobs.c.updated_at.desc(), jobs.c.job_id)
        .limit(limit)
    )
    return _readable_jobs(conn.execute(stmt))[0]  # an unreadable one is its own view's


def list_jobs(
    conn: Connection, prefix: str | None, limit: int, offset: int
) -> tuple[list[StoredJob], list[str]]:
    """Jobs ordered by id, optionally only those whose id starts with ``prefix``; and the ids of
    those among them whose stored state cannot be read (left out)."""
    stmt = select(jobs).order_by(jobs.c.job_id).limit(limit).offset(offset)
    return _readable_jobs(conn.execute(_with_prefix(stmt, prefix)))


@dataclass(frozen=True, slots=True)
class FleetTotals:
    """Every job's ended runs and savings together (see `fleet_totals`); joules and seconds."""

    jobs: int
    runs: int
    energy: float
    time: float
    jobs_with_savings: int
    jobs_saving: int
    energy_saved: float
    energy_baseline: float
    cost_saved: float
    cost_baseline: float


def fleet_totals(conn: Connection, prefix: str | None, not_ended: Collection[str]) -> FleetTotals:
    """Totals over the jobs (whose id starts with ``prefix``), in one aggregate query: the runs
    ended (status not in ``not_ended``) and their energy and time, and the savings of the jobs
    whose savings are known, against delivering their models at the default batch size.

    Per job, as `zeus_bso_server.queries.savings_of` computes them: with ``d`` the runs of the
    default batch size, savings are known when one of them converged and some run was not
    one; the baseline is the converged runs times what a converged run cost at the default
    (everything the default's runs spent over its converged runs)."""
    default_size = jobs.c.config["default_batch_size"].as_integer()
    ended = trials.c.status.not_in(sorted(not_ended))
    delivered = and_(ended, trials.c.status == "reported", trials.c.converged == true())
    at_default = trials.c.batch_size == default_size

    def count(condition: Any) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    def total(condition: Any, column: Any) -> Any:
        return func.coalesce(
            func.sum(case((condition, func.coalesce(column, 0.0)), else_=0.0)), 0.0
        )

    per_job = _with_prefix(
        select(
            func.max(jobs.c.config["eta_knob"].as_float()).label("eta"),
            func.max(jobs.c.config["max_power"].as_float()).label("power"),
            count(ended).label("ended"),
            count(delivered).label("delivered"),
            total(ended, trials.c.energy).label("energy"),
            total(ended, trials.c.time).label("time"),
            count(and_(ended, at_default)).label("d_ended"),
            count(and_(delivered, at_default)).label("d_delivered"),
            total(and_(ended, at_default), trials.c.energy).label("d_energy"),
            total(and_(ended, at_default), trials.c.time).label("d_time"),
        )
        .select_from(jobs.outerjoin(trials, trials.c.job_id == jobs.c.job_id))
        .group_by(jobs.c.job_id),
        prefix,
    ).subquery()
    job = per_job.c
    known = and_(
        job.d_delivered > 0,
        or_(job.delivered != job.d_delivered, job.ended != job.d_ended),
    )
    share = job.delivered * 1.0 / func.nullif(job.d_delivered, 0)
    base_energy = share * job.d_energy
    base_time = share * job.d_time
    saved_cost = job.eta * (base_energy - job.energy) + (1.0 - job.eta) * job.power * (
        base_time - job.time
    )
    spent_cost = job.eta * job.energy + (1.0 - job.eta) * job.power * job.time

    def when_known(value: Any) -> Any:
        return func.coalesce(func.sum(case((known, value), else_=0.0)), 0.0)

    row = conn.execute(
        select(
            func.count().label("jobs"),
            func.coalesce(func.sum(job.ended), 0).label("runs"),
            func.coalesce(func.sum(job.energy), 0.0).label("energy"),
            func.coalesce(func.sum(job.time), 0.0).label("time"),
            func.coalesce(func.sum(case((known, 1), else_=0)), 0).label("with_savings"),
            func.coalesce(func.sum(case((and_(known, saved_cost >= 0), 1), else_=0)), 0).label(
                "saving"
            ),
            when_known(base_energy - job.energy).label("energy_saved"),
            when_known(base_energy).label("energy_baseline"),
            when_known(saved_cost).label("cost_saved"),
            when_known(saved_cost + spent_cost).label("cost_baseline"),
        )
    ).one()
    return FleetTotals(
        jobs=int(row.jobs),
        runs=int(row.runs),
        energy=float(row.energy),
        time=float(row.time),
        jobs_with_savings=int(row.with_savings),
        jobs_saving=int(row.saving),
        energy_saved=float(row.energy_saved),
        energy_baseline=float(row.energy_baseline),
        cost_saved=float(row.cost_saved),
        cost_baseline=float(row.cost_baseline),
    )


def delete_job(conn: Connection, job_id: str) -> None:
    """Delete a job with its trials and statistics."""
    conn.execute(delete(trials).where(trials.c.job_id == job_id))
    conn.execute(delete(power_profiles).where(power_profiles.c.job_id == job_id))
    conn.execute(delete(jobs).where(jobs.c.job_id == job_id))


_SET_STATS = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(
        stats=bindparam("stats", type_=JSON()),
        best_batch_size=bindparam("best_batch_size"),
        best_cost=bindparam("best_cost"),
        arms=bindparam("arms", type_=jobs.c.arms.type),
    )
)


def finish_trial(conn: Connection, job_id: str, trial: TrialState, job: JobState) -> None:
    """Store a trial's final report and the job's statistics, early-stop reference and arms
    after it (from `zeus_bso.policy.after_report`: an exploration on new hardware that
    converged joins the arms)."""
    params: dict[str, Any] = {
        **_key(job_id, trial.trial_number),
        **_measured(trial),
        "status": trial.status.value,
        "converged": trial.converged,
        "message": trial.message,
        "stats": _stats_json(job.stats.values()),
        "best_batch_size": job.best.batch_size if job.best else None,
        "best_cost": job.best.cost if job.best else None,
        "arms": list(job.arms) if job.arms is not None else None,
    }
    conn.execute(_FINISH, params)
    conn.execute(_SET_STATS, params)


def explorations(conn: Connection, job_id: str) -> tuple[TrialState, ...]:
    """The job's pruning explorations."""
    return tuple(trial_state(r) for r in conn.execute(_EXPLORATIONS, {"job_id": job_id}))


def latest_costs(
    conn: Connection, job_id: str, batch_sizes: Iterable[int], window: int
) -> WindowedCosts:
    """For each of ``batch_sizes``: the costs of its latest ``window`` reported trials, oldest
    first, with their trials' profiles. One statement: a UNION ALL of one indexed, limited read
    per batch size (``ix_trials_job_bs_status_number``), so its cost does not grow with the
    job's trials."""
    sizes = list(batch_sizes)
    result: dict[int, list[tuple[float, str | None]]] = {size: [] for size in sizes}
    if not sizes or window <= 0:
        return result
    newest = [
        select(trials.c.batch_size, trials.c.trial_number, trials.c.cost, trials.c.profile)
        .where(
            trials.c.job_id == job_id,
            trials.c.batch_size == size,
            trials.c.status == TrialStatus.REPORTED.value,
        )
        .order_by(trials.c.trial_number.desc())
        .limit(window)
        .subquery()
        for size in sizes
    ]
    stmt = union_all(*(select(part) for part in newest))
    rows = sorted(conn.execute(stmt).all(), key=lambda row: (row[0], row[1]))
    for size, _, cost, profile in rows:
        if cost is not None:
            result[int(size)].append((float(cost), profile))
    return result


def set_profiles(
    conn: Connection, job_id: str, config: dict[str, Any], profiles: Sequence[GpuConfig]
) -> None:
    """Store the job's configuration (its GPUs: the profile registered last) and profiles."""
    values = [p.model_dump(mode="json") for p in profiles]
    stmt = update(jobs).where(jobs.c.job_id == job_id)
    conn.execute(stmt.values(config=config, profiles=values, updated_at=db_now()))


_RUN = (
    select(trials)
    .where(trials.c.job_id == bindparam("job_id"), trials.c.run_key == bindparam("run_key"))
    .order_by(trials.c.trial_number.desc())
    .limit(1)
)


def trial_of_run(conn: Connection, job_id: str, run_key: str) -> StoredTrial | None:
    """The latest trial the run named ``run_key`` started, if any."""
    row = conn.execute(_RUN, {"job_id": job_id, "run_key": run_key}).first()
    return _stored_trial(row) if row is not None else None


def get_trial(conn: Connection, job_id: str, trial_number: int) -> StoredTrial | None:
    """One trial."""
    row = conn.execute(_TRIAL, {"job_id": job_id, "trial_number": trial_number}).first()
    return _stored_trial(row) if row is not None else None


# Its parameters named after columns are the values of those columns.
_INSERT_TRIAL = insert(trials).values(
    lease_expires_at=db_now() + bindparam("lease", type_=Double())
)


def start_trial(
    conn: Connection,
    job_id: str,
    trial: TrialState,
    lease: float,
    job: JobState,
    run_key: str | None = None,
) -> None:
    """Store a new dispatched trial whose lease runs ``lease`` seconds, and the job after its
    dispatch (`zeus_bso.policy.after_dispatch`): the next trial number and, from the decision
    that ends pruning on, the arms."""
    row = {**_trial_row(trial), "job_id": job_id, "run_key": run_key, "lease": lease}
    conn.execute(_INSERT_TRIAL, row)
    entering = job.bandit_start == trial.trial_number
    advance = {"key_job_id": job_id, "next_trial_number": job.next_trial_number}
    if entering:
        advance.update(arms=list(job.arms or ()), bandit_start=job.bandit_start)
    conn.execute(_ENTER_BANDIT if entering else _ADVANCE, advance)


_THE_TRIAL = (
    trials.c.job_id == bindparam("key_job_id"),
    trials.c.trial_number == bindparam("key_number"),
)
_MEASURED_COLUMNS = ("epochs", "time", "energy", "metric", "cost", "curve", "accumulation_steps")
_MEASURED: dict[str, Any] = {c: bindparam(c, type_=trials.c[c].type) for c in _MEASURED_COLUMNS}
_RENEWS, _RENEWED = _change(Event.RENEW)
_RENEW = (
    update(trials)
    .where(*_THE_TRIAL, _RENEWS)
    .values(**_RENEWED, lease_expires_at=db_now() + bindparam("lease", type_=Double()))
)
_PROGRESS = (
    update(trials)
    .where(*_THE_TRIAL)
    .values(
        status=bindparam("status"),
        lease_expires_at=db_now() + bindparam("lease", type_=Double()),
        updated_at=db_now(),
        **_MEASURED,
    )
)
_FINISH = (
    update(trials)
    .where(*_THE_TRIAL)
    .values(
        status=bindparam("status"),
        converged=bindparam("converged"),
        message=bindparam("message"),
        lease_expires_at=None,
        updated_at=db_now(),
        **_MEASURED,
    )
)
_ENDS, _ENDED = _change(Event.END)
_FAIL = (
    update(trials)
    .where(*_THE_TRIAL, trials.c.batch_size == bindparam("key_bs"), _ENDS)
    .values(**_ENDED, lease_expires_at=None)
)
_RELEASES, _RELEASED = _change(Event.RELEASE)
_RELEASE = (
    update(trials)
    .where(
        *_THE_TRIAL,
        trials.c.batch_size == bindparam("key_bs"),
        _RELEASES,
    )
    .values(**_RELEASED, lease_expires_at=None)
)


_END_AS = (
    update(trials)
    .where(*_THE_TRIAL)
    .values(status=bindparam("status"), lease_expires_at=None, updated_at=db_now())
)


def end_trial_as(conn: Connection, job_id: str, trial: TrialState) -> None:
    """Store the terminal status of a trial that ended without a measurement of its own (an
    ``infeasible`` one); its lease ends."""
    conn.execute(_END_AS, {**_key(job_id, trial.trial_number), "status": trial.status.value})


def _trial_row(trial: TrialState) -> dict[str, Any]:
    """A trial's columns (the inverse of `trial_state`)."""
    return {
        "trial_number": trial.trial_number,
        "batch_size": trial.batch_size,
        "kind": trial.kind.value,
        "round": trial.round,
        "status": trial.status.value,
        "epochs": trial.epochs,
        "time": trial.time,
        "energy": trial.energy,
        "metric": trial.metric,
        "cost": trial.cost,
        "converged": trial.converged,
        "message": trial.message,
        "profile": trial.profile,
        "curve": [list(point) for point in trial.curve],
        "accumulates": trial.accumulates,
        "power_profiling": trial.power_profiling,
        "must_deliver": trial.must_deliver,
    }


def _key(job_id: str, trial_number: int) -> dict[str, Any]:
    return {"key_job_id": job_id, "key_number": trial_number}


def _measured(trial: TrialState) -> dict[str, Any]:
    return {c: getattr(trial, c) for c in _MEASURED_COLUMNS}


def record_progress(conn: Connection, job_id: str, trial: TrialState, lease: float) -> None:
    """Store a trial after a report that did not end it, with a lease of ``lease`` seconds."""
    params = {**_key(job_id, trial.trial_number), **_measured(trial), "lease": lease}
    conn.execute(_PROGRESS, {**params, "status": trial.status.value})


def renew_lease(conn: Connection, job_id: str, trial_number: int, lease: float) -> bool:
    """Renew a trial (the policy's `Event.RENEW`): an open one is dispatched with a lease of
    ``lease`` seconds from now. Returns whether it was open."""
    result = conn.execute(_RENEW, {**_key(job_id, trial_number), "lease": lease})
    return bool(result.rowcount)


def move_trial(conn: Connection, job_id: str, trial_number: int, profile: str) -> None:
    """Put a trial on another hardware profile (a run restarted on other GPUs)."""
    stmt = update(trials).where(trials.c.job_id == job_id, trials.c.trial_number == trial_number)
    conn.execute(stmt.values(profile=profile))


def set_dispatched_for(
    conn: Connection,
    job_id: str,
    trial_number: int,
    *,
    accumulates: bool | None = None,
    power_profiling: bool | None = None,
    must_deliver: bool | None = None,
) -> None:
    """Store what a trial's run was dispatched (or resumed) for: that it accumulates
    gradients, that it was told to profile power limits, that it must deliver a model (None:
    left as stored)."""
    given = (
        ("accumulates", accumulates),
        ("power_profiling", power_profiling),
        ("must_deliver", must_deliver),
    )
    values = {name: value for name, value in given if value is not None}
    if values:
        stmt = update(trials).where(
            trials.c.job_id == job_id, trials.c.trial_number == trial_number
        )
        conn.execute(stmt.values(**values))


def mark_failed(conn: Connection, job_id: str, trial_number: int, batch_size: int) -> bool | None:
    """End a trial (the policy's `Event.END`: one without a final report becomes failed).
    Returns whether it changed, or None if there is no such trial."""
    params = {**_key(job_id, trial_number), "key_bs": batch_size}
    if conn.execute(_FAIL, params).rowcount:
        return True
    stored = get_trial(conn, job_id, trial_number)
    return False if stored is not None and stored.trial.batch_size == batch_size else None


def release_trial(conn: Connection, job_id: str, trial_number: int, batch_size: int) -> bool | None:
    """Release an open trial (the policy's `Event.RELEASE`). Returns whether it changed, or None
    if there is no such trial."""
    params = {**_key(job_id, trial_number), "key_bs": batch_size}
    if conn.execute(_RELEASE, params).rowcount:
        return True
    stored = get_trial(conn, job_id, trial_number)
    return False if stored is not None and stored.trial.batch_size == batch_size else None


def pin_job(conn: Connection, job_id: str, batch_size: int | None) -> None:
    """Pin the job to ``batch_size`` (None: unpin)."""
    stmt = update(jobs).where(jobs.c.job_id == job_id)
    conn.execute(stmt.values(pinned_batch_size=batch_size, updated_at=db_now()))


def recent_trials(
    conn: Connection, job_id: str, limit: int, before: int | None
) -> list[StoredTrial]:
    """The job's trials, newest first, optionally only those numbered below ``before``."""
    stmt = select(trials).where(trials.c.job_id == job_id)
    if before is not None:
        stmt = stmt.where(trials.c.trial_number < before)
    stmt = stmt.order_by(trials.c.trial_number.desc()).limit(limit)
    return [_stored_trial(row) for row in conn.execute(stmt)]


def spent(conn: Connection, job_ids: Sequence[str]) -> list[Spent]:
    """What the jobs' trials used so far, per job, batch size and status (`Spent`)."""
    stmt = (
        select(
            trials.c.job_id,
            trials.c.batch_size,
            trials.c.status,
            trials.c.converged,
            func.count().label("runs"),
            func.coalesce(func.sum(trials.c.energy), 0.0).label("energy"),
            func.coalesce(func.sum(trials.c.time), 0.0).label("time"),
        )
        .where(trials.c.job_id.in_(job_ids))
        .group_by(trials.c.job_id, trials.c.batch_size, trials.c.status, trials.c.converged)
    )
    return [
        Spent(
            row.job_id,
            row.batch_size,
            row.status,
            bool(row.converged),
            row.runs,
            row.energy,
            row.time,
        )
        for row in conn.execute(stmt)
    ]


@dataclass(frozen=True, slots=True)
class StoredPowerProfile:
    """A batch size's power profile on a hardware profile, and the trial that measured it."""

    profile: str
    batch_size: int
    trial_number: int
    measurements: tuple[PowerMeasurement, ...]

    def view(self, job: CreatedJob, state: JobState) -> PowerProfileView:
        """The profile as the API shows it, with the limit its runs train at
        (`zeus_bso.policy.power.trained_limit`, at ``job``'s cost and ``state``'s profiles)."""
        return PowerProfileView(
            profile=self.profile,
            batch_size=self.batch_size,
            power_limit=trained_limit(job, state, self.profile, self.measurements),
            measurements=list(self.measurements),
            trial_number=self.trial_number,
        )


def _power_profiles(rows: Iterable[Record]) -> list[StoredPowerProfile]:
    grouped: dict[tuple[str, int], list[Record]] = {}
    for row in rows:
        grouped.setdefault((row.profile, row.batch_size), []).append(row)
    return [
        StoredPowerProfile(
            profile,
            batch_size,
            limits[0].trial_number,
            tuple(
                PowerMeasurement(
                    power_limit=r.power_limit,
                    time_per_epoch=r.time_per_epoch,
                    energy_per_epoch=r.energy_per_epoch,
                )
                for r in sorted(limits, key=lambda r: r.power_limit)
            ),
        )
        for (profile, batch_size), limits in sorted(grouped.items())
    ]


def power_profile(
    conn: Connection, job_id: str, profile: str, batch_size: int
) -> StoredPowerProfile | None:
    """The power profile of ``batch_size`` on ``profile``, if a run measured it."""
    rows = conn.execute(
        select(power_profiles).where(
            power_profiles.c.job_id == job_id,
            power_profiles.c.profile == profile,
            power_profiles.c.batch_size == batch_size,
        )
    ).all()
    found = _power_profiles(rows)
    return found[0] if found else None


def power_profiles_of(conn: Connection, job_id: str) -> list[StoredPowerProfile]:
    """Every power profile of the job, by hardware profile and batch size."""
    rows = conn.execute(select(power_profiles).where(power_profiles.c.job_id == job_id)).all()
    return _power_profiles(rows)


def delete_power_profiles(
    conn: Connection, job_id: str, profile: str | None, batch_size: int | None
) -> list[tuple[str, int]]:
    """Delete the job's power profiles on ``profile`` of ``batch_size`` (None: any); returns
    the (hardware profile, batch size) pairs deleted."""
    where = [power_profiles.c.job_id == job_id]
    if profile is not None:
        where.append(power_profiles.c.profile == profile)
    if batch_size is not None:
        where.append(power_profiles.c.batch_size == batch_size)
    found = conn.execute(
        select(power_profiles.c.profile, power_profiles.c.batch_size).where(*where).distinct()
    ).all()
    conn.execute(delete(power_profiles).where(*where))
    return sorted((str(row.profile), int(row.batch_size)) for row in found)


def insert_power_profile(conn: Connection, job_id: str, stored: StoredPowerProfile) -> None:
    """Store a power profile (the caller, holding the job's lock, checked there is none)."""
    conn.execute(
        insert(power_profiles),
        [
            {
                "job_id": job_id,
                "profile": stored.profile,
                "batch_size": stored.batch_size,
                "trial_number": stored.trial_number,
                **m.model_dump(),
            }
            for m in stored.measurements
        ],
    )
