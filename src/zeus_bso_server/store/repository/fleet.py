"""SQL over many jobs at once: what their trials spent (`spent`), the fleet's totals and
savings in one aggregate query (`fleet_totals`), and the jobs that learn nothing now
(`jobs_not_learning`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    case,
    func,
    or_,
    select,
    true,
)
from sqlalchemy.engine import Connection

from zeus_bso.policy import TrialStatus
from zeus_bso_server.store.repository.jobs import with_prefix
from zeus_bso_server.store.repository.rows import jobs, trials
from zeus_bso_server.store.tables import db_now


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


@dataclass(frozen=True, slots=True)
class FleetTotals:
    """Every job's ended runs and savings together (see `fleet_totals`); joules and seconds."""

    jobs: int
    runs: int
    energy: float
    time: float
    in_flight: int
    jobs_with_savings: int
    jobs_saving: int
    energy_saved: float
    energy_baseline: float
    cost_saved: float
    cost_baseline: float


def fleet_totals(conn: Connection, prefix: str | None, not_ended: Collection[str]) -> FleetTotals:
    """Totals over the jobs (whose id starts with ``prefix``), in one aggregate query: the runs
    ended (status not in ``not_ended``) and their energy and time, the runs in flight (their
    trials dispatched, their leases alive), and the savings of the jobs whose savings are
    known, against delivering their models at the default batch size.

    Per job, as `zeus_bso_server.queries.savings_of` computes them: with ``d`` the runs of the
    default batch size, savings are known when one of them converged and some run was not
    one; the baseline is the converged runs times what a converged run cost at the default
    (everything the default's runs spent over its converged runs)."""
    default_size = jobs.c.config["default_batch_size"].as_integer()
    ended = trials.c.status.not_in(sorted(not_ended))
    alive = or_(trials.c.lease_expires_at.is_(None), trials.c.lease_expires_at >= db_now())
    in_flight = and_(trials.c.status == TrialStatus.DISPATCHED.value, alive)
    delivered = and_(ended, trials.c.status == "reported", trials.c.converged == true())
    at_default = trials.c.batch_size == default_size

    def count(condition: Any) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    def total(condition: Any, column: Any) -> Any:
        return func.coalesce(
            func.sum(case((condition, func.coalesce(column, 0.0)), else_=0.0)), 0.0
        )

    per_job = with_prefix(
        select(
            func.max(jobs.c.config["eta_knob"].as_float()).label("eta"),
            func.max(jobs.c.config["max_power"].as_float()).label("power"),
            count(ended).label("ended"),
            count(in_flight).label("in_flight"),
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
            func.coalesce(func.sum(job.in_flight), 0).label("in_flight"),
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
        in_flight=int(row.in_flight),
        jobs_with_savings=int(row.with_savings),
        jobs_saving=int(row.saving),
        energy_saved=float(row.energy_saved),
        energy_baseline=float(row.energy_baseline),
        cost_saved=float(row.cost_saved),
        cost_baseline=float(row.cost_baseline),
    )


def jobs_not_learning(prefix: str | None, in_a_row: int) -> Select[Any]:
    """The ids of the jobs (whose id starts with ``prefix``) whose newest ``in_a_row`` ended
    trials (not those in progress) were all released: none of them was counted, as
    `zeus_bso_server.queries.not_learning` says of one job. One statement, to count them or to
    keep a list to them: a window over the trials of the jobs with that many released trials
    (the only ones that may have released their newest; few, in a fleet that learns)."""
    released_ones = trials.c.status == TrialStatus.RELEASED.value
    may_be = with_prefix(
        select(trials.c.job_id).where(released_ones), prefix, trials.c.job_id
    ).group_by(trials.c.job_id)
    newest = func.row_number().over(
        partition_by=trials.c.job_id, order_by=trials.c.trial_number.desc()
    )
    ranked = (
        select(trials.c.job_id, trials.c.status, newest.label("newest"))
        .where(
            trials.c.status != TrialStatus.DISPATCHED.value,
            trials.c.job_id.in_(may_be.having(func.count() >= in_a_row)),
        )
        .subquery()
    )
    released = func.sum(case((ranked.c.status == TrialStatus.RELEASED.value, 1), else_=0))
    return (
        select(ranked.c.job_id)
        .where(ranked.c.newest <= in_a_row)
        .group_by(ranked.c.job_id)
        .having(func.count() == in_a_row, released == in_a_row)
    )


def count_jobs_not_learning(conn: Connection, prefix: str | None, in_a_row: int) -> int:
    """How many jobs `jobs_not_learning` names."""
    found = jobs_not_learning(prefix, in_a_row).subquery()
    return int(conn.execute(select(func.count()).select_from(found)).scalar_one())


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
