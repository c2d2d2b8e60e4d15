"""SQL for one job at a time. Every function runs inside the caller's transaction.

Each read a request needs is bounded and indexed: per-batch-size statistics (one row per batch
size), the pruning explorations (bounded by rounds x batch sizes x failures) and, with a window,
the last ``window_size`` reports per arm. The hot paths use SQLAlchemy Core statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Float, Row, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from zeus_bso.policy import (
    BestRun,
    ConvergedStats,
    CostStats,
    Exploration,
    TrialKind,
    TrialStatus,
    best_reference,
)
from zeus_bso.spec import CreatedJob
from zeus_bso_server.store.tables import BatchSizeStatsRow, JobRow, TrialRow, db_now

jobs = cast(Table, JobRow.__table__)
trials = cast(Table, TrialRow.__table__)
stats = cast(Table, BatchSizeStatsRow.__table__)


def insert_job_if_absent(
    conn: Connection, job_id: str, prefix: str, config: dict[str, Any], stage: str
) -> bool:
    """Insert a job row (and its statistics rows) unless the id exists. Returns whether it did."""
    values = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "config": config,
        "stage": stage,
        "next_trial_number": 1,
    }
    dialect = conn.dialect.name
    if dialect == "postgresql":
        stmt: Any = pg_insert(jobs).values(values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        stmt = sqlite_insert(jobs).values(values).on_conflict_do_nothing()
    else:
        stmt = insert(jobs).prefix_with("IGNORE").values(values)
    inserted = bool(conn.execute(stmt).rowcount)
    if inserted:
        conn.execute(
            insert(stats),
            [
                {
                    "job_id": job_id,
                    "batch_size": b,
                    "reports": 0,
                    "mean_cost": 0.0,
                    "m2_cost": 0.0,
                    "converged_count": 0,
                    "converged_cost_sum": 0.0,
                }
                for b in config["batch_sizes"]
            ],
        )
    return inserted


# The statements every request runs are built once; only their parameters change.
_JOB = select(jobs).where(jobs.c.job_id == bindparam("job_id"))
_JOB_FOR_UPDATE = _JOB.with_for_update()
_TRIAL = select(trials).where(
    trials.c.job_id == bindparam("job_id"), trials.c.trial_number == bindparam("trial_number")
)
_STATS = select(stats).where(stats.c.job_id == bindparam("job_id")).order_by(stats.c.batch_size)
_EXPLORATIONS = select(
    trials.c.round,
    trials.c.batch_size,
    trials.c.trial_number,
    trials.c.status,
    trials.c.converged,
    trials.c.cost,
).where(trials.c.job_id == bindparam("job_id"), trials.c.kind == TrialKind.EXPLORATION.value)
_EXPIRE = (
    update(trials)
    .where(
        trials.c.job_id == bindparam("expired_job_id"),
        trials.c.status == TrialStatus.DISPATCHED.value,
        trials.c.lease_expires_at < db_now(),
    )
    .values(status=TrialStatus.ABANDONED.value, updated_at=db_now())
)


def get_job(conn: Connection, job_id: str, *, lock: bool = False) -> Row[Any] | None:
    """The job row, locked for the rest of the transaction when ``lock`` is set."""
    return conn.execute(_JOB_FOR_UPDATE if lock else _JOB, {"job_id": job_id}).first()


_ADVANCE = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(next_trial_number=bindparam("next_trial_number"), updated_at=db_now())
)
_ENTER_BANDIT = _ADVANCE.values(
    arms=bindparam("arms", type_=jobs.c.arms.type),
    stage="bandit",
    bandit_start=bindparam("bandit_start"),
)


def advance_job(
    conn: Connection, job_id: str, next_trial_number: int, arms: list[int] | None
) -> None:
    """Store the job's next trial number and, when it enters the bandit stage, its arms."""
    params: dict[str, Any] = {"key_job_id": job_id, "next_trial_number": next_trial_number}
    if arms is None:
        conn.execute(_ADVANCE, params)
    else:
        conn.execute(_ENTER_BANDIT, {**params, "arms": arms, "bandit_start": next_trial_number - 1})


def list_jobs(conn: Connection, prefix: str | None, limit: int, offset: int) -> Sequence[Row[Any]]:
    """Jobs ordered by id, optionally only those whose id starts with ``prefix``."""
    stmt = select(jobs).order_by(jobs.c.job_id).limit(limit).offset(offset)
    if prefix:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(jobs.c.job_id.like(f"{escaped}%", escape="\\"))
    return conn.execute(stmt).all()


def delete_job(conn: Connection, job_id: str) -> None:
    """Delete a job with its trials and statistics."""
    conn.execute(delete(trials).where(trials.c.job_id == job_id))
    conn.execute(delete(stats).where(stats.c.job_id == job_id))
    conn.execute(delete(jobs).where(jobs.c.job_id == job_id))


def expire_leases(conn: Connection, job_id: str) -> int:
    """Mark the job's dispatched trials whose lease ran out as abandoned. Returns how many."""
    result = conn.execute(_EXPIRE, {"expired_job_id": job_id})
    return int(result.rowcount)


def stats_rows(conn: Connection, job_id: str) -> Sequence[Row[Any]]:
    """The job's per-batch-size statistics, by batch size."""
    return conn.execute(_STATS, {"job_id": job_id}).all()


def cost_stats(row: Row[Any]) -> CostStats:
    """The running cost statistics of a statistics row."""
    return CostStats(row.reports, row.mean_cost, row.m2_cost)


def best_run(job: Row[Any]) -> BestRun | None:
    """The job's cheapest converged run so far."""
    if job.best_cost is None:
        return None
    return BestRun(job.best_batch_size, job.best_cost)


_SET_BEST = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("key_job_id"))
    .values(best_batch_size=bindparam("best_batch_size"), best_cost=bindparam("best_cost"))
)


_OBSERVE = (
    update(stats)
    .where(stats.c.job_id == bindparam("key_job_id"), stats.c.batch_size == bindparam("key_bs"))
    .values(
        reports=bindparam("reports"),
        mean_cost=bindparam("mean_cost"),
        m2_cost=bindparam("m2_cost"),
        converged_count=bindparam("converged_count"),
        converged_cost_sum=bindparam("converged_cost_sum"),
        best_converged_cost=bindparam("best_converged_cost"),
    )
)


def add_observation(
    conn: Connection,
    job: Row[Any],
    config: CreatedJob,
    batch_size: int,
    cost: float,
    converged: bool,
) -> None:
    """Fold one final report into the batch size's statistics and the job's early-stop
    reference (see `zeus_bso.policy.best_reference`)."""
    rows = stats_rows(conn, job.job_id)
    row = next(r for r in rows if r.batch_size == batch_size)
    updated = cost_stats(row).add(cost)
    best = row.best_converged_cost
    if converged and (best is None or cost < best):
        best = cost
    converged_count = row.converged_count + int(converged)
    converged_cost_sum = row.converged_cost_sum + (cost if converged else 0.0)
    conn.execute(
        _OBSERVE,
        {
            "key_job_id": row.job_id,
            "key_bs": row.batch_size,
            "reports": updated.count,
            "mean_cost": updated.mean,
            "m2_cost": updated.m2,
            "converged_count": converged_count,
            "converged_cost_sum": converged_cost_sum,
            "best_converged_cost": best,
        },
    )
    if converged:
        # The statistics just read, with this batch size's as now written: no second read.
        per_size = converged_stats(rows)
        per_size[batch_size] = ConvergedStats(converged_count, converged_cost_sum, best)
        reference = best_reference(config, per_size)
        assert reference is not None
        conn.execute(
            _SET_BEST,
            {
                "key_job_id": job.job_id,
                "best_batch_size": reference.batch_size,
                "best_cost": reference.cost,
            },
        )


def converged_stats(rows: Sequence[Row[Any]]) -> dict[int, ConvergedStats]:
    """Per batch size, its converged runs' count, total cost and cheapest cost."""
    return {
        r.batch_size: ConvergedStats(r.converged_count, r.converged_cost_sum, r.best_converged_cost)
        for r in rows
    }


def explorations(conn: Connection, job_id: str) -> tuple[Exploration, ...]:
    """The job's pruning explorations."""
    return tuple(
        Exploration(
            round=r.round or 0,
            batch_size=r.batch_size,
            trial_number=r.trial_number,
            status=TrialStatus(r.status),
            converged=r.converged,
            cost=r.cost,
        )
        for r in conn.execute(_EXPLORATIONS, {"job_id": job_id})
    )


def windowed_costs(
    conn: Connection, job_id: str, batch_sizes: Sequence[int], window: int
) -> dict[int, CostStats]:
    """Statistics of the last ``window`` reported costs of each batch size (oldest first)."""
    result: dict[int, CostStats] = {}
    for batch_size in batch_sizes:
        stmt = (
            select(trials.c.cost)
            .where(
                trials.c.job_id == job_id,
                trials.c.batch_size == batch_size,
                trials.c.status == TrialStatus.REPORTED.value,
            )
            .order_by(trials.c.trial_number.desc())
            .limit(window)
        )
        costs = [float(c) for c in conn.execute(stmt).scalars() if c is not None]
        result[batch_size] = CostStats.of(reversed(costs))
    return result


def get_trial(conn: Connection, job_id: str, trial_number: int) -> Row[Any] | None:
    """One trial."""
    return conn.execute(_TRIAL, {"job_id": job_id, "trial_number": trial_number}).first()


_INSERT_TRIAL = insert(trials).values(
    job_id=bindparam("job_id"),
    trial_number=bindparam("trial_number"),
    batch_size=bindparam("batch_size"),
    kind=bindparam("kind"),
    round=bindparam("round"),
    status=TrialStatus.DISPATCHED.value,
    lease_expires_at=db_now() + bindparam("lease", type_=Float()),
)


def insert_trial(
    conn: Connection,
    job_id: str,
    trial_number: int,
    batch_size: int,
    kind: TrialKind,
    round_index: int | None,
    lease: float,
) -> None:
    """Store a new dispatched trial whose lease runs ``lease`` seconds."""
    conn.execute(
        _INSERT_TRIAL,
        {
            "job_id": job_id,
            "trial_number": trial_number,
            "batch_size": batch_size,
            "kind": kind.value,
            "round": round_index,
            "lease": lease,
        },
    )


_THE_TRIAL = (
    trials.c.job_id == bindparam("key_job_id"),
    trials.c.trial_number == bindparam("key_number"),
)
_MEASURED: dict[str, Any] = {
    "epochs": bindparam("epochs"),
    "time": bindparam("time"),
    "energy": bindparam("energy"),
    "metric": bindparam("metric"),
    "cost": bindparam("cost"),
}
_RENEW = (
    update(trials)
    .where(*_THE_TRIAL)
    .values(
        status=TrialStatus.DISPATCHED.value,
        lease_expires_at=db_now() + bindparam("lease", type_=Float()),
        updated_at=db_now(),
    )
)
_PROGRESS = _RENEW.values(**_MEASURED)
_FINISH = (
    update(trials)
    .where(*_THE_TRIAL)
    .values(
        status=TrialStatus.REPORTED.value,
        converged=bindparam("converged"),
        message=bindparam("message"),
        lease_expires_at=None,
        updated_at=db_now(),
        **_MEASURED,
    )
)
_OPEN_STATES = (TrialStatus.DISPATCHED.value, TrialStatus.ABANDONED.value)
_RENEW_OPEN = _RENEW.where(trials.c.status.in_(_OPEN_STATES))
_FAIL = (
    update(trials)
    .where(
        *_THE_TRIAL,
        trials.c.batch_size == bindparam("key_bs"),
        trials.c.status.in_(_OPEN_STATES),
    )
    .values(status=TrialStatus.FAILED.value, lease_expires_at=None, updated_at=db_now())
)


def _key(job_id: str, trial_number: int) -> dict[str, Any]:
    return {"key_job_id": job_id, "key_number": trial_number}


def record_progress(
    conn: Connection, job_id: str, trial_number: int, measured: dict[str, Any], lease: float
) -> None:
    """Store a non-final report; the trial is (again) dispatched with a renewed lease."""
    conn.execute(_PROGRESS, {**_key(job_id, trial_number), **measured, "lease": lease})


def record_final(
    conn: Connection,
    job_id: str,
    trial_number: int,
    measured: dict[str, Any],
    converged: bool,
    message: str,
) -> None:
    """Store the final report of a trial."""
    params = {**_key(job_id, trial_number), **measured, "converged": converged}
    conn.execute(_FINISH, {**params, "message": message})


def renew_lease(conn: Connection, job_id: str, trial_number: int, lease: float) -> bool:
    """Give a dispatched or abandoned trial a lease of ``lease`` seconds from now (it is
    dispatched again). Returns whether the trial was open."""
    result = conn.execute(_RENEW_OPEN, {**_key(job_id, trial_number), "lease": lease})
    return bool(result.rowcount)


def mark_failed(conn: Connection, job_id: str, trial_number: int, batch_size: int) -> bool:
    """Mark a trial that ended without a final report as failed. Returns whether it was open
    (a reported or already failed trial is left as it is)."""
    result = conn.execute(_FAIL, {**_key(job_id, trial_number), "key_bs": batch_size})
    return bool(result.rowcount)


def recent_trials(
    conn: Connection, job_id: str, limit: int, before: int | None
) -> Sequence[Row[Any]]:
    """The job's trials, newest first, optionally only those numbered below ``before``."""
    stmt = select(trials).where(trials.c.job_id == job_id)
    if before is not None:
        stmt = stmt.where(trials.c.trial_number < before)
    stmt = stmt.order_by(trials.c.trial_number.desc()).limit(limit)
    return conn.execute(stmt).all()


def count_trials_by_status(conn: Connection, job_id: str) -> dict[str, int]:
    """How many trials the job has in each status."""
    stmt = (
        select(trials.c.status, func.count())
        .where(trials.c.job_id == job_id)
        .group_by(trials.c.status)
    )
    return {str(status): int(n) for status, n in conn.execute(stmt).all()}
