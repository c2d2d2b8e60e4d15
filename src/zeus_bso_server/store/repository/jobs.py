"""SQL of a job's row: register, read and lock it (the job row is the lock of every request that
changes the job), list jobs, store its profiles, memory caps and pin, delete it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Select,
    bindparam,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.engine import Connection

from zeus_bso.policy import (
    BatchSizeStats,
    BestRun,
    ByProfile,
    Event,
    Prior,
)
from zeus_bso.spec import GpuConfig
from zeus_bso_server.store.dialects import dialect_of
from zeus_bso_server.store.repository.rows import (
    UPDATE_JOB,
    StoredJob,
    by_profile_json,
    change,
    jobs,
    power_profiles,
    prior_json,
    readable_jobs,
    stats_json,
    stored_job,
    trials,
)
from zeus_bso_server.store.tables import db_now

_SET_BY_PROFILE = UPDATE_JOB.values(by_profile=bindparam("by_profile", type_=JSON()))


def set_by_profile(conn: Connection, job_id: str, by: ByProfile) -> None:
    """Store the job's epochs and bandit trials by profile."""
    conn.execute(_SET_BY_PROFILE, {"key_job_id": job_id, "by_profile": by_profile_json(by)})


_SET_MEMORY_CAPS = UPDATE_JOB.values(
    memory_caps=bindparam("memory_caps", type_=JSON()), updated_at=db_now()
)


def set_memory_caps(conn: Connection, job_id: str, caps: dict[str, int]) -> None:
    """Store the job's memory caps by profile."""
    conn.execute(
        _SET_MEMORY_CAPS, {"key_job_id": job_id, "memory_caps": dict(sorted(caps.items()))}
    )


_SET_MEMORY_DOUBTS = UPDATE_JOB.values(
    memory_doubts=bindparam("memory_doubts", type_=JSON()), updated_at=db_now()
)


def set_memory_doubts(conn: Connection, job_id: str, doubts: dict[str, int]) -> None:
    """Store the job's memory doubts by profile (none: NULL)."""
    conn.execute(
        _SET_MEMORY_DOUBTS,
        {"key_job_id": job_id, "memory_doubts": dict(sorted(doubts.items())) or None},
    )


_SET_PRIOR = UPDATE_JOB.values(prior=bindparam("prior", type_=JSON()))


def set_prior(conn: Connection, job_id: str, prior: Prior) -> None:
    """Store the prior a new job was seeded with."""
    conn.execute(_SET_PRIOR, {"key_job_id": job_id, "prior": prior_json(prior)})


def latest_of_prefix(conn: Connection, prefix: str, excluding: str) -> list[StoredJob]:
    """The readable jobs of ``prefix`` but ``excluding``, the one updated last first."""
    rows = conn.execute(
        select(jobs)
        .where(jobs.c.job_id_prefix == prefix, jobs.c.job_id != excluding)
        .order_by(jobs.c.updated_at.desc(), jobs.c.job_id)
    ).all()
    return readable_jobs(rows)[0]


def insert_job_if_absent(
    conn: Connection, job_id: str, prefix: str, config: dict[str, Any]
) -> bool:
    """Insert a job row (and its statistics rows) unless the id exists. Returns whether it did."""
    values = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "config": config,
        "next_trial_number": 1,
        "stats": stats_json(BatchSizeStats(b) for b in config["batch_sizes"]),
    }
    return dialect_of(conn).insert_if_absent(conn, jobs, values)


# The statements every request runs are built once; only their parameters change.
_JOB = select(jobs).where(jobs.c.job_id == bindparam("job_id"))


_JOB_FOR_UPDATE = _JOB.with_for_update()


_EXPIRES, _EXPIRED = change(Event.EXPIRE)


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
    return stored_job(row) if row is not None else None


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


def with_prefix(stmt: Select[Any], prefix: str | None, job_id: Any = jobs.c.job_id) -> Select[Any]:
    """``stmt`` restricted to the jobs whose id (its column ``job_id``: the jobs' by default)
    starts with ``prefix`` (None: every job)."""
    if not prefix:
        return stmt
    return stmt.where(
        job_id.startswith(prefix, autoescape=True),  # can use the primary key's index
        # Exact: SQLite's LIKE ignores the case of ASCII letters, ids do not.
        func.substr(job_id, 1, len(prefix)) == prefix,
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
    return readable_jobs(conn.execute(stmt))[0]  # an unreadable one is its own view's


def list_jobs(
    conn: Connection,
    prefix: str | None,
    limit: int,
    offset: int,
    among: Sequence[Select[Any]] = (),
) -> tuple[list[StoredJob], list[str]]:
    """Jobs ordered by id, optionally only those whose id starts with ``prefix`` and those
    each of ``among`` names (selects of job ids); and the ids of those among them whose stored
    state cannot be read (left out)."""
    stmt = select(jobs).order_by(jobs.c.job_id).limit(limit).offset(offset)
    for named in among:
        stmt = stmt.where(jobs.c.job_id.in_(named))
    return readable_jobs(conn.execute(with_prefix(stmt, prefix)))


def delete_job(conn: Connection, job_id: str) -> None:
    """Delete a job with its trials and statistics."""
    conn.execute(delete(trials).where(trials.c.job_id == job_id))
    conn.execute(delete(power_profiles).where(power_profiles.c.job_id == job_id))
    conn.execute(delete(jobs).where(jobs.c.job_id == job_id))


def set_profiles(
    conn: Connection, job_id: str, config: dict[str, Any], profiles: Sequence[GpuConfig]
) -> None:
    """Store the job's configuration (its GPUs: the profile registered last) and profiles."""
    values = [p.model_dump(mode="json") for p in profiles]
    stmt = update(jobs).where(jobs.c.job_id == job_id)
    conn.execute(stmt.values(config=config, profiles=values, updated_at=db_now()))


def set_reference(conn: Connection, job_id: str, best: BestRun | None) -> None:
    """Store the job's early-stop reference (made again: its stop settings changed)."""
    stmt = update(jobs).where(jobs.c.job_id == job_id)
    batch_size, cost = (None, None) if best is None else (best.batch_size, best.cost)
    conn.execute(stmt.values(best_batch_size=batch_size, best_cost=cost))


def pin_job(conn: Connection, job_id: str, batch_size: int | None) -> None:
    """Pin the job to ``batch_size`` (None: unpin)."""
    stmt = update(jobs).where(jobs.c.job_id == job_id)
    conn.execute(stmt.values(pinned_batch_size=batch_size, updated_at=db_now()))
