"""The read side: what the added routes and the dashboard show of jobs, read from the store in
one transaction each (`zeus_bso_server.read_models` are the answers): job summaries, one job with
its statistics, posterior and recommendation, savings against the default, the fleet."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import takewhile

from pydantic import ValidationError
from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.errors import NoConvergedBatchSizeError, NoFittingBatchSizeError
from zeus_bso.policy import TrialState
from zeus_bso.policy.horizon import Horizon
from zeus_bso.policy.orchestration import Reading, decision_view, next_run, reading
from zeus_bso.policy.priors import standing
from zeus_bso.policy.pruning import PRIOR_ROUND, PruningSettings
from zeus_bso.spec import CreatedJob, differing_settings, profile_key
from zeus_bso_server.errors import JobNotFoundError, UnreadableJobError
from zeus_bso_server.mixed_models import ALIKE, mixed_models
from zeus_bso_server.read_models import (
    BatchSizeView,
    FleetSummary,
    HorizonView,
    JobStage,
    JobSummary,
    JobView,
    NextRun,
    Recommendation,
    Savings,
    SeededFrom,
    SettingDifference,
    SiblingJob,
    TrainedModel,
    TrialView,
)
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.repository import Ending, Spent, StoredJob, StoredTrial
from zeus_bso_server.store.sql_store import SqlJobStore

logger = logging.getLogger(__name__)

NOT_ENDED = policy.OPEN | {policy.TrialStatus.RELEASED}
"""Runs not counted as spending: in progress (counted when they end), or released (never
trained)."""


def trial_view(stored: StoredTrial) -> TrialView:
    """View of a stored trial: the policy's trial (`zeus_bso.policy.TrialState`, each field by
    its name), its job, times and lease."""
    trial = stored.trial
    return TrialView(
        **asdict(trial) | {"curve": list(trial.curve) if stored.curve_kept else None},
        job_id=stored.job_id,
        model_parameters=stored.model_parameters,
        precision=stored.precision,
        techniques=repo.techniques_said(stored.techniques),
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        lease_expires_at=stored.lease_expires_at,
    )


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def savings_of(job: CreatedJob, spent: Iterable[Spent]) -> Savings | str:
    """The job's savings against delivering its models at the default batch size, from
    `repo.spent` rows (see `Savings`), or why there is no figure yet, in words."""
    energy = time = 0.0
    ended = delivered = 0
    default_energy = default_time = 0.0
    default_ended = default_delivered = 0
    for row in spent:
        if row.status in NOT_ENDED:
            continue  # a run in progress (counted when it ends), or one that never trained
        converged = row.status == policy.TrialStatus.REPORTED and row.converged
        energy += row.energy
        time += row.time
        ended += row.runs
        delivered += row.runs if converged else 0
        if row.batch_size == job.default_batch_size:
            default_energy += row.energy
            default_time += row.time
            default_ended += row.runs
            default_delivered += row.runs if converged else 0
    default = job.default_batch_size
    if default_delivered == 0:
        if default_ended:
            return (
                f"the default batch size ({default}) never converged in its {default_ended} "
                f"run{'' if default_ended == 1 else 's'}: there is no model at the default to "
                "compare with"
            )
        unknown = f"not known until a run of the default batch size ({default}) converges"
        if job.prior_from is not None and job.prior_mode == "trust":
            unknown += (  # a trusted parent's job starts at the parent's best, not the default
                f"; seeded from {job.prior_from} in trust mode, this job runs it only where its "
                "walk comes to it: that job's savings are the measure of its curve"
            )
        return unknown
    if delivered == default_delivered and ended == default_ended:
        return f"every run so far used the default batch size ({default})"
    base_energy = delivered * default_energy / default_delivered
    base_time = delivered * default_time / default_delivered

    def cost(joules: float, seconds: float) -> float:
        return policy.zeus_cost(joules, seconds, job.eta_knob, job.max_power)

    base_cost = cost(base_energy, base_time)
    saved = cost(base_energy - energy, base_time - time)
    return Savings(
        default_batch_size=default,
        default_runs=default_delivered,
        runs=delivered,
        ended_runs=ended,
        energy=base_energy - energy,
        time=base_time - time,
        cost=saved,
        fraction=saved / base_cost if base_cost > 0 else 0.0,
    )


def _savings_and_why(job: CreatedJob, spent: Iterable[Spent]) -> tuple[Savings | None, str | None]:
    found = savings_of(job, spent)
    return (found, None) if isinstance(found, Savings) else (None, found)


def _looking_ahead(
    store: SqlJobStore, config: CreatedJob, job: StoredJob
) -> tuple[Reading, NextRun]:
    """The job read once (for its history and its next run), as its next run finds it, and
    that run (`policy.orchestration.next_run`, on its current profile). Pruning ends with the
    last exploration's report, but the job takes its bandit's arms at the next dispatch: until
    then the reading has the arms that dispatch sets, so that the arms, their posteriors and the
    recommendation shown are the ones the next run draws from, as its stage is (`shown_stage`)."""
    read = reading(store, config, job.state)
    found = next_run(store, config, profile_key(config), read)
    if read.state.arms is None and isinstance(found, policy.Dispatched) and found.job.arms:
        ahead = replace(read.state, arms=found.job.arms, bandit_start=found.job.bandit_start)
        read = replace(read, state=ahead)
    return read, _next_run(config, found)


def _next_run(config: CreatedJob, found: policy.Dispatched | NoConvergedBatchSizeError) -> NextRun:
    """What the job's next run on its current profile gets, in a reader's words."""
    if isinstance(found, NoFittingBatchSizeError):
        return NextRun(
            batch_size=None, kind=None, arms=None, refused=True, why=str(found).rstrip(".")
        )
    if isinstance(found, NoConvergedBatchSizeError):
        return NextRun(
            batch_size=None,
            kind=None,
            arms=None,
            refused=True,
            why=(
                f"no batch size converged in pruning round {found.round_index + 1} (tried "
                f"{found.tried}); change the job: lower target_metric, raise max_epochs, or add "
                "batch sizes (a new job_id, or delete this one with `zeus-bso jobs delete`)"
            ),
        )
    decided = found.dispatch
    arms_text = ", ".join(map(str, decided.arms or ()))
    if decided.kind is policy.TrialKind.BANDIT and decided.drawn:
        return NextRun(
            batch_size=None,
            kind=decided.kind,
            arms=list(decided.arms or ()),
            refused=False,
            why=f"the {config.bandit} bandit draws it among {arms_text}",
        )
    if decided.kind is policy.TrialKind.BANDIT and decided.probe:
        why = (
            f"on GPUs new to the job ({profile_key(config)}), a second arm measured there says "
            f"whether they reorder the batch sizes (profile_probe); the arms: {arms_text}"
        )
    elif decided.kind is policy.TrialKind.BANDIT:
        why = f"the {config.bandit} bandit settled on it among {arms_text}: it no longer draws"
    elif decided.kind is policy.TrialKind.PINNED:
        why = "the job is pinned to it (`zeus-bso jobs unpin` lets the optimizer choose again)"
    elif decided.kind is policy.TrialKind.CONCURRENT:
        why = "the best batch size so far, while an exploration runs"
    elif decided.kind is policy.TrialKind.EXPLOIT:
        why = (
            f"the cheapest batch size so far: within the job's expected_recurrences "
            f"({config.expected_recurrences}) another exploration could not pay back"
        )
    elif decided.round == PRIOR_ROUND:
        why = "the walk on the curve of the job this one was seeded from explores it"
    else:
        why = f"pruning round {(decided.round or 0) + 1} explores it"
    return NextRun(
        batch_size=decided.batch_size,
        kind=decided.kind,
        arms=list(decided.arms) if decided.arms is not None else None,
        refused=False,
        why=why,
    )


def _profiles(config: CreatedJob, state: policy.JobState) -> list[str]:
    return list(state.profiles) or [profile_key(config)]


def _recommendation(
    config: CreatedJob, state: policy.JobState, history: policy.JobHistory
) -> Recommendation | None:
    found = policy.recommended(config, state, history)
    if found is None:
        return None
    basis = "posterior" if state.arms is not None else "converged runs"
    return Recommendation(batch_size=found[0], expected_cost=found[1], basis=basis)


@dataclass(frozen=True, slots=True)
class JobList:
    """A page of job summaries, and the ids of its jobs whose stored state cannot be read
    (left out, each logged: one corrupt row harms only its own job)."""

    jobs: list[JobSummary]
    unreadable: list[str]


async def job_summaries(
    db: Database,
    prefix: str | None,
    limit: int,
    offset: int,
    not_learning: bool = False,
    mixed_models: bool = False,
) -> JobList:
    """Jobs ordered by id; with ``not_learning``, only those that learn nothing now
    (`repo.jobs_not_learning`); with ``mixed_models``, only those whose runs trained other
    models (`repo.jobs_mixing_models`)."""

    def work(conn: Connection) -> JobList:
        among = [
            *([repo.jobs_not_learning(prefix, RELEASED_IN_A_ROW)] if not_learning else []),
            *([repo.jobs_mixing_models(prefix, ALIKE)] if mixed_models else []),
        ]
        stored, unreadable = repo.list_jobs(conn, prefix, limit, offset, among)
        ids = [job.job_id for job in stored]
        spent = _spent_by_job(conn, ids)
        # Only a job with that many released runs may have released its newest ones.
        released = [
            job_id for job_id, used in spent.items() if _released(used) >= RELEASED_IN_A_ROW
        ]
        endings = repo.newest_endings(conn, released, RELEASED_IN_A_ROW)
        explored = repo.explorations_of(conn, ids)
        models = repo.models_of(conn, ids)
        summaries = []
        for job in stored:
            try:
                ended = endings.get(job.job_id, [])
                used, tried = spent[job.job_id], explored[job.job_id]
                summaries.append(_summary(conn, job, used, ended, tried, models[job.job_id]))
            except ValidationError as err:  # its configuration, corrupt
                logger.error("%s", UnreadableJobError(job.job_id, str(err)).message)
                unreadable.append(job.job_id)
        return JobList(summaries, unreadable)

    return await db.read(work)


def shown_stage(job: StoredJob, upcoming: NextRun) -> JobStage:
    """The stage a reader sees of ``job`` (the one place it is decided: the job view, the job
    list, the dashboard and the CLI show this): ``pinned`` while it is pinned, ``blocked``
    while its next run is refused, ``bandit`` where its next run is the bandit's (pruning
    ended with the last exploration's report, though the job moves on at the next dispatch),
    else the policy's stage."""
    if job.state.pinned is not None:
        return JobStage.PINNED
    if upcoming.refused:
        return JobStage.BLOCKED
    if upcoming.kind is policy.TrialKind.BANDIT:
        return JobStage.BANDIT
    return JobStage(job.stage)


def _summary(
    conn: Connection,
    job: StoredJob,
    spent: list[Spent],
    endings: list[Ending],
    explorations: Sequence[TrialState],
    models: Sequence[repo.ModelRuns],
) -> JobSummary:
    config = CreatedJob.model_validate(job.config)
    savings, savings_unknown = _savings_and_why(config, spent)
    store = SqlJobStore(conn, job.job_id, job.state, known_explorations=explorations)
    read, upcoming = _looking_ahead(store, config, job)
    state, history = decision_view(store, config, job.state, read)
    return JobSummary(
        job_id=job.job_id,
        job_id_prefix=job.job_id_prefix,
        stage=shown_stage(job, upcoming),
        trials=job.state.next_trial_number - 1,
        gpu_model=config.gpu_model,
        number_of_gpus=config.number_of_gpus,
        profiles=_profiles(config, state),
        best_batch_size=state.best.batch_size if state.best else None,
        best_cost=state.best.cost if state.best else None,
        recommended=_recommendation(config, state, history),
        savings=savings,
        savings_unknown=savings_unknown,
        not_learning=not_learning(endings, RELEASED_IN_A_ROW),
        mixed_models=mixed_models(job.job_id, models, profile_key(config)),
        created_at=job.created_at,
        updated_at=job.updated_at,
    )


_SPENT_CHUNK = 500
"""Jobs a query of their trials' sums names at once (databases bound the parameters)."""


def _spent_by_job(conn: Connection, job_ids: list[str]) -> dict[str, list[Spent]]:
    """What each job's trials used (`repo.spent`), every job of ``job_ids`` a key."""
    spent: dict[str, list[Spent]] = {job_id: [] for job_id in job_ids}
    for start in range(0, len(job_ids), _SPENT_CHUNK):
        for used in repo.spent(conn, job_ids[start : start + _SPENT_CHUNK]):
            spent[used.job_id].append(used)
    return spent


async def fleet_summary(db: Database, prefix: str | None) -> FleetSummary:
    """Spending and savings over every job (whose id starts with ``prefix``): one aggregate
    query (`repo.fleet_totals`), whatever the size of the fleet; and how many jobs learn
    nothing now (`repo.count_jobs_not_learning`) and how many mix models
    (`repo.count_jobs_mixing_models`), one each."""

    def work(conn: Connection) -> FleetSummary:
        totals = repo.fleet_totals(conn, prefix, {str(status) for status in NOT_ENDED})
        return FleetSummary(
            jobs=totals.jobs,
            runs=totals.runs,
            energy=totals.energy,
            time=totals.time,
            runs_in_flight=totals.in_flight,
            jobs_with_savings=totals.jobs_with_savings,
            jobs_saving=totals.jobs_saving,
            energy_saved=totals.energy_saved,
            energy_saved_fraction=(
                totals.energy_saved / totals.energy_baseline if totals.energy_baseline > 0 else 0.0
            ),
            cost_saved=totals.cost_saved,
            cost_saved_fraction=(
                totals.cost_saved / totals.cost_baseline if totals.cost_baseline > 0 else 0.0
            ),
            jobs_not_learning=repo.count_jobs_not_learning(conn, prefix, RELEASED_IN_A_ROW),
            jobs_mixing_models=repo.count_jobs_mixing_models(conn, prefix, ALIKE),
        )

    return await db.read(work)


async def job_view(db: Database, job_id: str, limit: int, before: int | None) -> JobView:
    """Everything the server knows of one job.

    Raises:
        JobNotFoundError: no such job.
    """
    return await db.read(lambda conn: _job_view(conn, job_id, limit, before))


def _batch_size_view(
    row: policy.BatchSizeStats, used: policy.CostStats, posterior: policy.Posterior | None
) -> BatchSizeView:
    running = row.costs
    return BatchSizeView(
        batch_size=row.batch_size,
        is_arm=posterior is not None,
        reports=row.reports,
        converged=row.converged_count,
        mean_cost=row.mean_cost if row.reports else None,
        cost_std=math.sqrt(running.variance) if row.reports > 1 else None,  # needs two
        best_converged_cost=row.best_converged_cost,
        observations=used.count,
        posterior_mean_reward=posterior.mean if posterior else None,
        posterior_std=_finite_or_none(posterior.std) if posterior else None,
    )


def _job_view(conn: Connection, job_id: str, limit: int, before: int | None) -> JobView:
    job = repo.get_job(conn, job_id)
    if job is None:
        raise JobNotFoundError(f"Job {job_id} not found")
    try:
        config = CreatedJob.model_validate(job.config)
    except ValidationError as err:
        raise UnreadableJobError(job_id, str(err)) from err
    store = SqlJobStore(conn, job_id, job.state)
    read, upcoming = _looking_ahead(store, config, job)
    state, history = decision_view(store, config, job.state, read)
    spent = repo.spent(conn, [job_id])
    models = repo.models_of(conn, [job_id])[job_id]
    savings, savings_unknown = _savings_and_why(config, spent)
    trials_by_status: Counter[str] = Counter()
    for group in spent:
        trials_by_status[group.status] += group.runs
    stats = state.stats
    used = {b: history.observations.get(b, policy.CostStats()) for b in stats}
    posteriors = policy.arm_posteriors(config, state.arms or (), used)
    best = state.best
    return JobView(
        job=config,
        profiles=_profiles(config, state),
        stage=shown_stage(job, upcoming),
        pinned=job.state.pinned,
        memory_caps=dict(job.state.memory_caps),
        memory_doubts=dict(job.state.memory_doubts),
        power_profiles=[p.view(config, job.state) for p in repo.power_profiles_of(conn, job_id)],
        next_run=upcoming,
        siblings=_siblings(conn, job),
        seeded_from=_seeded_from(config, job.state, read.inputs.explorations),
        horizon=_horizon_view(config, stats, job.state.prior),
        not_learning=not_learning(repo.newest_endings(conn, [job_id], NEWEST_SEEN)[job_id]),
        models=[
            TrainedModel(**asdict(m) | {"techniques": repo.techniques_said(m.techniques)})
            for m in models
        ],
        mixed_models=mixed_models(job_id, models, profile_key(config)),
        arms=list(state.arms) if state.arms is not None else None,
        best_batch_size=best.batch_size if best else None,
        best_cost=best.cost if best else None,
        recommended=_recommendation(config, state, history),
        savings=savings,
        savings_unknown=savings_unknown,
        trial_count=job.state.next_trial_number - 1,
        trials_by_status=dict(trials_by_status),
        batch_sizes=[
            _batch_size_view(s, used[s.batch_size], posteriors.get(s.batch_size))
            for s in stats.values()
        ],
        trials=[trial_view(t) for t in repo.recent_trials(conn, job_id, limit, before)],
        created_at=job.created_at,
        updated_at=job.updated_at,
    )


RELEASED_IN_A_ROW = 3
"""The newest ended runs of a job, all released, at which its view says it learns nothing (one
or two are a preemption, an interrupted run, a script being fixed)."""
NEWEST_SEEN = 20
"""The newest trials `not_learning` reads."""


def _released(spent: list[Spent]) -> int:
    """The released runs among a job's trials (`repo.spent`'s groups)."""
    return sum(g.runs for g in spent if g.status == policy.TrialStatus.RELEASED.value)


def not_learning(endings: list[Ending], seen: int = NEWEST_SEEN) -> str | None:
    """Why a job learns nothing now, from how its newest ended trials ended (``seen`` at most,
    newest first: `repo.newest_endings`): the newest, `RELEASED_IN_A_ROW` or more, were all
    released. None: it learns."""
    released = list(takewhile(lambda t: t.status is policy.TrialStatus.RELEASED, endings))
    if len(released) < RELEASED_IN_A_ROW:
        return None
    sizes = ", ".join(str(size) for size in sorted({t.batch_size for t in released}))
    runs = f"{len(released)}{' or more' if len(released) == seen else ''}"
    said = next((t.message for t in released if t.message), None)
    return (
        f"its last {runs} runs were released: none was counted against its batch size "
        f"({sizes}), so the job learned nothing from them, and the next run is dispatched as "
        f"they were{f'; the latest said: {said}' if said else ''}. A run is released when it "
        "ends for a reason that is not its batch size's (a misconfigured script, the "
        "framework's own epoch limit below the job's, an interruption): each run's own line "
        "says which; change it, or every run trains without the job learning"
    )


def _seeded_from(
    config: CreatedJob, state: policy.JobState, explorations: Iterable[policy.TrialState]
) -> SeededFrom | None:
    """Where the job stands with its prior, from the explorations its view read once (a job
    with a prior reads them: `zeus_bso.policy.orchestration`)."""
    prior = state.prior
    if prior is None:
        return None
    cap = state.memory_caps.get(profile_key(config))
    settings = PruningSettings.of(config, cap)
    return SeededFrom(
        job_id=prior.parent,
        mode=prior.mode.value,
        standing=standing(settings, prior, explorations),
        best_batch_size=prior.best(config.batch_sizes),
    )


def _horizon_view(
    config: CreatedJob, stats: Mapping[int, policy.BatchSizeStats], prior: policy.Prior | None
) -> HorizonView | None:
    """Where a job with ``expected_recurrences`` stands against its budget, as its next run's
    decision reads it (``stats``: in its current profile's cost units)."""
    if config.expected_recurrences is None:
        return None
    horizon = Horizon.of(config.expected_recurrences, stats, config.default_batch_size, prior)
    return HorizonView(
        recurrences=horizon.recurrences,
        expected=horizon.horizon,
        done=horizon.done,
        spent=horizon.spent,
        budget=horizon.budget,
        allowance=horizon.allowance,
        cheapest_cost=horizon.best_cost,
    )


SIBLINGS_SHOWN = 5
"""Other jobs of a prefix a job's view names."""


def _siblings(conn: Connection, job: repo.StoredJob) -> list[SiblingJob]:
    """The other jobs of ``job``'s prefix, the last changed first, and how they differ."""
    return [
        SiblingJob(
            job_id=other.job_id,
            trials=other.state.next_trial_number - 1,
            updated_at=other.updated_at,
            differences=[
                SettingDifference(name=name, here=job.config[name], there=other.config[name])
                for name in differing_settings(job.config, other.config)
            ],
        )
        for other in repo.jobs_of_prefix(conn, job.job_id_prefix, job.job_id, SIBLINGS_SHOWN)
    ]
