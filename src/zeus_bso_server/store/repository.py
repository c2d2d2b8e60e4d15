"""SQL for one job at a time. Every function runs inside the caller's transaction.

Each read a request needs is bounded and indexed: per-batch-size statistics (one row per batch
size), the pruning explorations (bounded by rounds x batch sizes x failures) and, with a window,
the last ``window_size`` reports per arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from zeus_bso.policy import BestRun, CostStats, Exploration, TrialKind, TrialStatus
from zeus_bso_server.store.tables import BatchSizeStatsRow, JobRow, TrialRow, db_now


async def insert_job_if_absent(
    session: AsyncSession, job_id: str, prefix: str, config: dict[str, Any], stage: str
) -> bool:
    """Insert a job row unless one with that id exists. Returns whether it was inserted."""
    values = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "config": config,
        "stage": stage,
        "next_trial_number": 1,
    }
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        stmt: Any = pg_insert(JobRow).values(values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        stmt = sqlite_insert(JobRow).values(values).on_conflict_do_nothing()
    else:
        stmt = insert(JobRow).prefix_with("IGNORE").values(values)
    result = await session.execute(stmt)
    inserted = bool(result.rowcount)  # type: ignore[attr-defined]
    if inserted:
        session.add_all(
            BatchSizeStatsRow(
                job_id=job_id, batch_size=b, count=0, mean_cost=0.0, m2_cost=0.0, converged_count=0
            )
            for b in config["batch_sizes"]
        )
        await session.flush()
    return inserted


async def get_job(session: AsyncSession, job_id: str, *, lock: bool = False) -> JobRow | None:
    """The job row, locked for the rest of the transaction when ``lock`` is set."""
    stmt = select(JobRow).where(JobRow.job_id == job_id)
    if lock:
        stmt = stmt.with_for_update()
    return (await session.execute(stmt)).scalar_one_or_none()


async def list_jobs(
    session: AsyncSession, prefix: str | None, limit: int, offset: int
) -> Sequence[JobRow]:
    """Jobs ordered by id, optionally only those whose id starts with ``prefix``."""
    stmt = select(JobRow).order_by(JobRow.job_id).limit(limit).offset(offset)
    if prefix:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(JobRow.job_id.like(f"{escaped}%", escape="\\"))
    return (await session.execute(stmt)).scalars().all()


async def delete_job(session: AsyncSession, job_id: str) -> None:
    """Delete a job with its trials and statistics."""
    await session.execute(delete(TrialRow).where(TrialRow.job_id == job_id))
    await session.execute(delete(BatchSizeStatsRow).where(BatchSizeStatsRow.job_id == job_id))
    await session.execute(delete(JobRow).where(JobRow.job_id == job_id))


async def expire_leases(session: AsyncSession, job_id: str) -> int:
    """Mark the job's dispatched trials whose lease ran out as abandoned. Returns how many."""
    result = await session.execute(
        update(TrialRow)
        .where(
            TrialRow.job_id == job_id,
            TrialRow.status == TrialStatus.DISPATCHED.value,
            TrialRow.lease_expires_at < db_now(),
        )
        .values(status=TrialStatus.ABANDONED.value, updated_at=db_now())
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def stats_rows(session: AsyncSession, job_id: str) -> Sequence[BatchSizeStatsRow]:
    """The job's per-batch-size statistics."""
    stmt = (
        select(BatchSizeStatsRow)
        .where(BatchSizeStatsRow.job_id == job_id)
        .order_by(BatchSizeStatsRow.batch_size)
    )
    return (await session.execute(stmt)).scalars().all()


def best_run(rows: Sequence[BatchSizeStatsRow]) -> BestRun | None:
    """The cheapest converged run among the statistics rows."""
    converged = [r for r in rows if r.best_converged_cost is not None]
    if not converged:
        return None
    best = min(converged, key=lambda r: (r.best_converged_cost, r.batch_size))
    assert best.best_converged_cost is not None
    return BestRun(best.batch_size, best.best_converged_cost)


async def best_converged_cost(session: AsyncSession, job_id: str) -> float | None:
    """The lowest cost of a converged run of the job."""
    stmt = select(func.min(BatchSizeStatsRow.best_converged_cost)).where(
        BatchSizeStatsRow.job_id == job_id
    )
    value = (await session.execute(stmt)).scalar_one_or_none()
    return None if value is None else float(value)


async def explorations(session: AsyncSession, job_id: str) -> tuple[Exploration, ...]:
    """The job's pruning explorations."""
    stmt = select(
        TrialRow.round,
        TrialRow.batch_size,
        TrialRow.trial_number,
        TrialRow.status,
        TrialRow.converged,
        TrialRow.cost,
    ).where(TrialRow.job_id == job_id, TrialRow.kind == TrialKind.EXPLORATION.value)
    return tuple(
        Exploration(
            round=r.round or 0,
            batch_size=r.batch_size,
            trial_number=r.trial_number,
            status=TrialStatus(r.status),
            converged=r.converged,
            cost=r.cost,
        )
        for r in (await session.execute(stmt)).all()
    )


async def windowed_costs(
    session: AsyncSession, job_id: str, batch_sizes: Sequence[int], window: int
) -> dict[int, CostStats]:
    """Statistics of the last ``window`` reported costs of each batch size (oldest first)."""
    result: dict[int, CostStats] = {}
    for batch_size in batch_sizes:
        stmt = (
            select(TrialRow.cost)
            .where(
                TrialRow.job_id == job_id,
                TrialRow.batch_size == batch_size,
                TrialRow.status == TrialStatus.REPORTED.value,
            )
            .order_by(TrialRow.trial_number.desc())
            .limit(window)
        )
        costs = [float(c) for c in (await session.execute(stmt)).scalars() if c is not None]
        result[batch_size] = CostStats.of(reversed(costs))
    return result


async def get_trial(session: AsyncSession, job_id: str, trial_number: int) -> TrialRow | None:
    """One trial."""
    return await session.get(TrialRow, (job_id, trial_number))


async def recent_trials(
    session: AsyncSession, job_id: str, limit: int, before: int | None
) -> Sequence[TrialRow]:
    """The job's trials, newest first, optionally only those numbered below ``before``."""
    stmt = select(TrialRow).where(TrialRow.job_id == job_id)
    if before is not None:
        stmt = stmt.where(TrialRow.trial_number < before)
    stmt = stmt.order_by(TrialRow.trial_number.desc()).limit(limit)
    return (await session.execute(stmt)).scalars().all()


async def count_trials_by_status(session: AsyncSession, job_id: str) -> dict[str, int]:
    """How many trials the job has in each status."""
    stmt = (
        select(TrialRow.status, func.count())
        .where(TrialRow.job_id == job_id)
        .group_by(TrialRow.status)
    )
    return {str(status): int(n) for status, n in (await session.execute(stmt)).all()}
