"""SQL for one job at a time. Every function runs inside the caller's transaction.

Each read a request needs is bounded and indexed: per-batch-size statistics (one row per batch
size), the pruning explorations (bounded by rounds x batch sizes x failures) and, with a window,
the last ``window_size`` reports per arm. The hot paths use SQLAlchemy Core statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Row, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from zeus_bso.policy import BestRun, CostStats, Exploration, TrialKind, TrialStatus
from zeus_bso_server.store.tables import BatchSizeStatsRow, JobRow, TrialRow, db_now

jobs = cast(Table, JobRow.__table__)
trials = cast(Table, TrialRow.__table__)
stats = cast(Table, BatchSizeStatsRow.__table__)


def insert_job_if_absent(
    session: Session, job_id: str, prefix: str, config: dict[str, Any], stage: str
) -> bool:
    """Insert a job row (and its statistics rows) unless the id exists. Returns whether it did."""
    values = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "config": config,
        "stage": stage,
        "next_trial_number": 1,
    }
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        stmt: Any = pg_insert(jobs).values(values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        stmt = sqlite_insert(jobs).values(values).on_conflict_do_nothing()
    else:
        stmt = insert(jobs).prefix_with("IGNORE").values(values)
    inserted = bool(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
    if inserted:
        session.execute(
            insert(stats),
            [
                {
                    "job_id": job_id,
                    "batch_size": b,
                    "reports": 0,
                    "mean_cost": 0.0,
                    "m2_cost": 0.0,
                    "converged_count": 0,
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


def get_job(session: Session, job_id: str, *, lock: bool = False) -> Row[Any] | None:
    """The job row, locked for the rest of the transaction when ``lock`` is set."""
    return session.execute(_JOB_FOR_UPDATE if lock else _JOB, {"job_id": job_id}).first()


def advance_job(
    session: Session, job_id: str, next_trial_number: int, arms: list[int] | None
) -> None:
    """Store the job's next trial number and, when it enters the bandit stage, its arms."""
    values: dict[str, Any] = {"next_trial_number": next_trial_number, "updated_at": db_now()}
    if arms is not None:
        values |= {"arms": arms, "stage": "bandit"}
    session.execute(update(jobs).where(jobs.c.job_id == job_id).values(values))


def list_jobs(session: Session, prefix: str | None, limit: int, offset: int) -> Sequence[Row[Any]]:
    """Jobs ordered by id, optionally only those whose id starts with ``prefix``."""
    stmt = select(jobs).order_by(jobs.c.job_id).limit(limit).offset(offset)
    if prefix:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(jobs.c.job_id.like(f"{escaped}%", escape="\\"))
    return session.execute(stmt).all()


def delete_job(session: Session, job_id: str) -> None:
    """Delete a job with its trials and statistics."""
    session.execute(delete(trials).where(trials.c.job_id == job_id))
    session.execute(delete(stats).where(stats.c.job_id == job_id))
    session.execute(delete(jobs).where(jobs.c.job_id == job_id))


def expire_leases(session: Session, job_id: str) -> int:
    """Mark the job's dispatched trials whose lease ran out as abandoned. Returns how many."""
    result = session.execute(_EXPIRE, {"expired_job_id": job_id})
    return int(result.rowcount)  # type: ignore[attr-defined]


def stats_rows(session: Session, job_id: str) -> Sequence[Row[Any]]:
    """The job's per-batch-size statistics, by batch size."""
    return session.execute(_STATS, {"job_id": job_id}).all()


def cost_stats(row: Row[Any]) -> CostStats:
    """The running cost statistics of a statistics row."""
    return CostStats(row.reports, row.mean_cost, row.m2_cost)


def best_run(rows: Sequence[Row[Any]]) -> BestRun | None:
    """The cheapest converged run among the statistics rows."""
    converged = [r for r in rows if r.best_converged_cost is not None]
    if not converged:
        return None
    best = min(converged, key=lambda r: (r.best_converged_cost, r.batch_size))
    return BestRun(best.batch_size, best.best_converged_cost)


def add_observation(session: Session, row: Row[Any], cost: float, converged: bool) -> None:
    """Fold one final report into a batch size's statistics."""
    updated = cost_stats(row).add(cost)
    values: dict[str, Any] = {"reports": updated.count, "mean_cost": updated.mean}
    values["m2_cost"] = updated.m2
    if converged:
        values["converged_count"] = row.converged_count + 1
        if row.best_converged_cost is None or cost < row.best_converged_cost:
            values["best_converged_cost"] = cost
    session.execute(
        update(stats)
        .where(stats.c.job_id == row.job_id, stats.c.batch_size == row.batch_size)
        .values(values)
    )


def explorations(session: Session, job_id: str) -> tuple[Exploration, ...]:
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
        for r in session.execute(_EXPLORATIONS, {"job_id": job_id})
    )


def windowed_costs(
    session: Session, job_id: str, batch_sizes: Sequence[int], window: int
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
        costs = [float(c) for c in session.execute(stmt).scalars() if c is not None]
        result[batch_size] = CostStats.of(reversed(costs))
    return result


def get_trial(session: Session, job_id: str, trial_number: int) -> Row[Any] | None:
    """One trial."""
    return session.execute(_TRIAL, {"job_id": job_id, "trial_number": trial_number}).first()


def insert_trial(session: Session, values: dict[str, Any]) -> None:
    """Store a new trial."""
    session.execute(insert(trials).values(values))


def update_trial(session: Session, job_id: str, trial_number: int, values: dict[str, Any]) -> None:
    """Change a trial (``updated_at`` is stamped with the database's clock)."""
    session.execute(
        update(trials)
        .where(trials.c.job_id == job_id, trials.c.trial_number == trial_number)
        .values({**values, "updated_at": db_now()})
    )


def recent_trials(
    session: Session, job_id: str, limit: int, before: int | None
) -> Sequence[Row[Any]]:
    """The job's trials, newest first, optionally only those numbered below ``before``."""
    stmt = select(trials).where(trials.c.job_id == job_id)
    if before is not None:
        stmt = stmt.where(trials.c.trial_number < before)
    stmt = stmt.order_by(trials.c.trial_number.desc()).limit(limit)
    return session.execute(stmt).all()


def count_trials_by_status(session: Session, job_id: str) -> dict[str, int]:
    """How many trials the job has in each status."""
    stmt = (
        select(trials.c.status, func.count())
        .where(trials.c.job_id == job_id)
        .group_by(trials.c.status)
    )
    return {str(status): int(n) for status, n in session.execute(stmt).all()}
