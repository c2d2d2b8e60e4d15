"""SQL of a job's trials: dispatch, report, renew, release, fail, end; the explorations and the
latest costs the policy reads; a run's trial, and the trials a page shows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Double,
    Text,
    bindparam,
    func,
    insert,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Connection

from zeus_bso.policy import (
    Event,
    JobState,
    TrialKind,
    TrialState,
    TrialStatus,
)
from zeus_bso.policy.profiles import WindowedCosts
from zeus_bso_server.store.repository.rows import (
    UPDATE_JOB,
    Ending,
    StoredTrial,
    change,
    jobs,
    stats_json,
    stored_trial,
    trial_row,
    trial_state,
    trials,
)
from zeus_bso_server.store.tables import db_now


def trials_of(conn: Connection, job_id: str) -> list[TrialState]:
    """Every trial of the job, by number (read once, to count a job's trials by profile)."""
    stmt = select(trials).where(trials.c.job_id == job_id).order_by(trials.c.trial_number)
    return [trial_state(row) for row in conn.execute(stmt)]


_TRIAL = select(trials).where(
    trials.c.job_id == bindparam("job_id"), trials.c.trial_number == bindparam("trial_number")
)


_EXPLORATIONS = select(trials).where(
    trials.c.job_id == bindparam("job_id"), trials.c.kind == TrialKind.EXPLORATION.value
)


_ADVANCE = UPDATE_JOB.values(next_trial_number=bindparam("next_trial_number"), updated_at=db_now())


_ENTER_BANDIT = _ADVANCE.values(
    arms=bindparam("arms", type_=jobs.c.arms.type),
    bandit_start=bindparam("bandit_start"),
)


_SET_STATS = UPDATE_JOB.values(
    stats=bindparam("stats", type_=JSON()),
    best_batch_size=bindparam("best_batch_size"),
    best_cost=bindparam("best_cost"),
    arms=bindparam("arms", type_=jobs.c.arms.type),
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
        "stats": stats_json(job.stats.values()),
        "best_batch_size": job.best.batch_size if job.best else None,
        "best_cost": job.best.cost if job.best else None,
        "arms": list(job.arms) if job.arms is not None else None,
    }
    conn.execute(_FINISH, params)
    conn.execute(_SET_STATS, params)


def explorations(conn: Connection, job_id: str) -> tuple[TrialState, ...]:
    """The job's pruning explorations."""
    return tuple(trial_state(r) for r in conn.execute(_EXPLORATIONS, {"job_id": job_id}))


EXPLORATIONS_CHUNK = 500
"""Jobs one statement of `explorations_of` names (databases bound the parameters)."""


def explorations_of(conn: Connection, job_ids: Sequence[str]) -> dict[str, tuple[TrialState, ...]]:
    """`explorations` of each of the jobs, every one a key: one statement for
    `EXPLORATIONS_CHUNK` jobs, where a page of jobs read them one by one."""
    found: dict[str, list[TrialState]] = {job_id: [] for job_id in job_ids}
    for start in range(0, len(job_ids), EXPLORATIONS_CHUNK):
        stmt = (
            select(trials)
            .where(
                trials.c.job_id.in_(job_ids[start : start + EXPLORATIONS_CHUNK]),
                trials.c.kind == TrialKind.EXPLORATION.value,
            )
            .order_by(trials.c.job_id, trials.c.trial_number)
        )
        for row in conn.execute(stmt):
            found[row.job_id].append(trial_state(row))
    return {job_id: tuple(states) for job_id, states in found.items()}


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


_RUN = (
    select(trials)
    .where(trials.c.job_id == bindparam("job_id"), trials.c.run_key == bindparam("run_key"))
    .order_by(trials.c.trial_number.desc())
    .limit(1)
)


def trial_of_run(conn: Connection, job_id: str, run_key: str) -> StoredTrial | None:
    """The latest trial the run named ``run_key`` started, if any."""
    row = conn.execute(_RUN, {"job_id": job_id, "run_key": run_key}).first()
    return stored_trial(row) if row is not None else None


def get_trial(conn: Connection, job_id: str, trial_number: int) -> StoredTrial | None:
    """One trial."""
    row = conn.execute(_TRIAL, {"job_id": job_id, "trial_number": trial_number}).first()
    return stored_trial(row) if row is not None else None


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
    row = {**trial_row(trial), "job_id": job_id, "run_key": run_key, "lease": lease}
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


_RENEWS, _RENEWED = change(Event.RENEW)


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


_ENDS, _ENDED = change(Event.END)


_ENDING = func.coalesce(bindparam("ending", type_=Text()), trials.c.message)
"""Why a run ended, as its client said it (kept where it said nothing)."""

_FAIL = (
    update(trials)
    .where(*_THE_TRIAL, trials.c.batch_size == bindparam("key_bs"), _ENDS)
    .values(**_ENDED, lease_expires_at=None, message=_ENDING)
)


_RELEASES, _RELEASED = change(Event.RELEASE)


_RELEASE = (
    update(trials)
    .where(
        *_THE_TRIAL,
        trials.c.batch_size == bindparam("key_bs"),
        _RELEASES,
    )
    .values(**_RELEASED, lease_expires_at=None, message=_ENDING)
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
    resumed_at_epoch: int | None = None,
) -> None:
    """Store what a trial's run was dispatched (or resumed) for: that it accumulates
    gradients, that it was told to profile power limits, that it must deliver a model, the
    epochs it had reported when it resumed (None: left as stored)."""
    given = (
        ("accumulates", accumulates),
        ("power_profiling", power_profiling),
        ("must_deliver", must_deliver),
        ("resumed_at_epoch", resumed_at_epoch),
    )
    values = {name: value for name, value in given if value is not None}
    if values:
        stmt = update(trials).where(
            trials.c.job_id == job_id, trials.c.trial_number == trial_number
        )
        conn.execute(stmt.values(**values))


def mark_failed(
    conn: Connection, job_id: str, trial_number: int, batch_size: int, why: str | None = None
) -> bool | None:
    """End a trial (the policy's `Event.END`: one without a final report becomes failed, with
    ``why`` as its message where given). Returns whether it changed, or None if there is no
    such trial."""
    return _ended_by(conn, _FAIL, job_id, trial_number, batch_size, why)


def release_trial(
    conn: Connection, job_id: str, trial_number: int, batch_size: int, why: str | None = None
) -> bool | None:
    """Release an open trial (the policy's `Event.RELEASE`; ``why`` its message where given).
    Returns whether it changed, or None if there is no such trial."""
    return _ended_by(conn, _RELEASE, job_id, trial_number, batch_size, why)


def _ended_by(
    conn: Connection,
    statement: Any,
    job_id: str,
    trial_number: int,
    batch_size: int,
    why: str | None,
) -> bool | None:
    """Run an ending's conditional update (`_FAIL`, `_RELEASE`) on the trial: whether it
    changed, or None if there is no such trial (of that batch size)."""
    params = {**_key(job_id, trial_number), "key_bs": batch_size, "ending": why}
    if conn.execute(statement, params).rowcount:
        return True
    stored = get_trial(conn, job_id, trial_number)
    return False if stored is not None and stored.trial.batch_size == batch_size else None


def _newest_endings(job_id: str, limit: int) -> Any:
    return (
        select(trials.c.job_id, trials.c.trial_number, trials.c.status)
        .add_columns(trials.c.batch_size, trials.c.message)
        .where(trials.c.job_id == job_id, trials.c.status != TrialStatus.DISPATCHED.value)
        .order_by(trials.c.trial_number.desc())
        .limit(limit)
        .subquery()
    )


ENDINGS_CHUNK = 100
"""Jobs one statement of `newest_endings` reads (databases bound a compound statement's
parts)."""


def newest_endings(conn: Connection, job_ids: Iterable[str], limit: int) -> dict[str, list[Ending]]:
    """How each job's newest ended trials (not those in progress) ended, ``limit`` at most,
    newest first. A UNION ALL of one indexed, limited read per job, `ENDINGS_CHUNK` jobs a
    statement."""
    ids = list(job_ids)
    found: dict[str, list[Ending]] = {job_id: [] for job_id in ids}
    for start in range(0, len(ids), ENDINGS_CHUNK):
        parts = [_newest_endings(job_id, limit) for job_id in ids[start : start + ENDINGS_CHUNK]]
        stmt = union_all(*(select(part) for part in parts))
        for job_id, _, status, batch_size, message in sorted(
            conn.execute(stmt).all(), key=lambda row: (row[0], -row[1])
        ):
            found[job_id].append(Ending(TrialStatus(status), int(batch_size), message))
    return found


def recent_trials(
    conn: Connection, job_id: str, limit: int, before: int | None
) -> list[StoredTrial]:
    """The job's trials, newest first, optionally only those numbered below ``before``."""
    stmt = select(trials).where(trials.c.job_id == job_id)
    if before is not None:
        stmt = stmt.where(trials.c.trial_number < before)
    stmt = stmt.order_by(trials.c.trial_number.desc()).limit(limit)
    return [stored_trial(row) for row in conn.execute(stmt)]
