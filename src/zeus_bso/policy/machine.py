"""The job's state machine: what a dispatch, a report, the end of a run and the expiry of its
lease do to a job and its trials.

Pure functions over frozen states (`JobState`, `TrialState`) return the new states and the
answer. The server loads the states under the job row's lock and stores what comes back; the
simulator keeps them in memory. Neither holds a transition rule of its own.

A trial's status::

    dispatched ── final report ────────────────────> reported
    dispatched ── progress report or renewal ──────> dispatched
    dispatched ── lease ran out (EXPIRE) ──────────> abandoned
    abandoned  ── progress report or renewal ──────> dispatched  (the run was alive after all)
    dispatched, abandoned ── ended by client (END) > failed      (no final report came)
    dispatched, abandoned ── released (RELEASE) ───> released    (says nothing of its size)
    dispatched, abandoned ── out of memory (OOM) ──> infeasible  (its size, and larger ones,
                                                                  do not fit on its profile)

A report on a failed trial is still judged (a client may end a trial before its last report
reaches the server); a reported trial answers every later report with its final verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import NotRequired, TypedDict

from zeus_bso.errors import PinnedOutOfMemoryError, ReportMismatchError
from zeus_bso.policy.cost import (
    Report,
    StopRules,
    answer_of,
    best_reference,
    fold_final_report,
    fresh_run_cost,
    judge_report,
    run_load,
    stopped_itself,
    zeus_cost,
)
from zeus_bso.policy.curves import Curve, epochs_left, extended, outlasting_its_stall
from zeus_bso.policy.decide import decide, rng_for
from zeus_bso.policy.history import history_seen
from zeus_bso.policy.horizon import Horizon, over_horizon
from zeus_bso.policy.priors import bandit_credit, epoch_scales, over_prior
from zeus_bso.policy.priors import extension as prior_extension
from zeus_bso.policy.profiles import (
    Profiles,
    WindowedCosts,
    counted_anew,
    extension,
    job_on,
    probe_arm,
    profiles_of,
    state_on,
)
from zeus_bso.policy.pruning import PRIOR_ROUND, PruningSettings
from zeus_bso.policy.types import Dispatch, JobHistory, JobState, TrialState, Verdict
from zeus_bso.spec import CreatedJob, ReportResponse, TrialKind, TrialStatus, profile_key


class Event(StrEnum):
    """What can happen to a trial besides a report."""

    END = "end"
    """The client ended the run (``PATCH /trials``)."""
    EXPIRE = "expire"
    """The trial's lease ran out: its client stopped reporting and renewing."""
    RENEW = "renew"
    """The client renewed the trial's lease (a heartbeat)."""
    RELEASE = "release"
    """The client released the trial (``POST /api/trials/release``)."""
    OUT_OF_MEMORY = "out_of_memory"
    """The run ran out of accelerator memory at the trial's batch size
    (``POST /api/trials/infeasible``)."""


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A trial in one of ``sources`` moves to ``target``; a trial in any other status stays."""

    sources: frozenset[TrialStatus]
    target: TrialStatus


OPEN = frozenset({TrialStatus.DISPATCHED, TrialStatus.ABANDONED})
"""Statuses of a run that may still be going: it has not sent its final report or been ended."""

LIFECYCLE: Mapping[Event, StatusChange] = MappingProxyType(
    {
        Event.END: StatusChange(OPEN, TrialStatus.FAILED),
        Event.EXPIRE: StatusChange(frozenset({TrialStatus.DISPATCHED}), TrialStatus.ABANDONED),
        Event.RENEW: StatusChange(OPEN, TrialStatus.DISPATCHED),
        Event.RELEASE: StatusChange(OPEN, TrialStatus.RELEASED),
        Event.OUT_OF_MEMORY: StatusChange(OPEN, TrialStatus.INFEASIBLE),
    }
)
"""The status changes that carry no measurement. The server's set-based updates are built from
this table (`zeus_bso_server.store.repository`); `after_event` applies it to one trial."""


def after_event(trial: TrialState, event: Event) -> TrialState:
    """The trial after ``event``."""
    change = LIFECYCLE[event]
    if trial.status in change.sources:
        return replace(trial, status=change.target)
    return trial


def out_of_memory(
    job: CreatedJob, state: JobState, trial: TrialState
) -> tuple[JobState, TrialState]:
    """The job and the trial after its run ran out of memory: an open trial becomes
    ``infeasible``, and its profile's memory cap (`JobState.memory_caps`) comes down to its batch
    size, unless a run of that size or a larger one reported on the profile (it fits there: the
    error was not the batch size's, and no cap is set at or below a size known to fit). A trial
    that is not open is left, and so is the job."""
    after = after_event(trial, Event.OUT_OF_MEMORY)
    if after.status is trial.status:
        return state, trial
    profile = trial.profile or next(iter(state.profiles), None) or profile_key(job)
    if any(state.measured(profile, b) for b in job.batch_sizes if b >= trial.batch_size):
        return state, after
    cap = min(state.memory_caps.get(profile, trial.batch_size), trial.batch_size)
    return replace(state, memory_caps={**state.memory_caps, profile: cap}), after


def micro_batch_out_of_memory(
    job: CreatedJob, state: JobState, trial: TrialState, micro_batch_size: int
) -> JobState:
    """The job after the run of an open ``trial``, which accumulates gradients, ran out of
    memory at ``micro_batch_size`` samples a micro-batch: its profile's memory cap comes down
    to that size, and the trial goes on (with smaller micro-batches). The run of an
    ``infeasible`` trial may go on at smaller sizes of its own (the HF Trainer's
    ``auto_find_batch_size``): one that ran out of memory too brings the cap down the same way.

    Raises:
        ReportMismatchError: ``micro_batch_size`` is above the trial's batch size (a
            micro-batch is a part of it; an ``infeasible`` trial's smaller size is below it),
            the open trial's run did not say it accumulates gradients (`TrialState.accumulates`),
            or the trial ended otherwise and its run did not say it accumulates (a run that
            does may say it late: the client keeps what the server could not hear while it
            was away, and the next run delivers it, after the trial ended).
    """
    infeasible = trial.status is TrialStatus.INFEASIBLE
    if micro_batch_size > trial.batch_size or (infeasible and micro_batch_size == trial.batch_size):
        raise ReportMismatchError(
            f"micro_batch_size {micro_batch_size} is "
            + (
                f"trial {trial.trial_number}'s batch size, which ran out of memory already: a "
                "smaller size of its run's own is below it"
                if micro_batch_size == trial.batch_size
                else f"above trial {trial.trial_number}'s batch size, {trial.batch_size}: a "
                "micro-batch is a part of the batch"
            )
        )
    if trial.status not in OPEN and not infeasible and trial.accumulates is not True:
        raise ReportMismatchError(
            f"trial {trial.trial_number} ended ({trial.status.value}) and its run did not say it "
            "accumulates gradients: it trained whole batches, which have no micro-batch"
        )
    if not infeasible and trial.accumulates is False:
        raise ReportMismatchError(
            f"trial {trial.trial_number}'s run did not say it accumulates gradients (accumulate="
            "true when it asked for its batch size): it trains whole batches, so an out-of-memory"
            " error makes the trial infeasible (send no micro_batch_size)"
        )
    profile = trial.profile or next(iter(state.profiles), None) or profile_key(job)
    cap = min(state.memory_caps.get(profile, micro_batch_size), micro_batch_size)
    return replace(state, memory_caps={**state.memory_caps, profile: cap})


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A dispatch: the job after it, the new trial, and the policy's decision."""

    job: JobState
    trial: TrialState
    dispatch: Dispatch

    @property
    def entered_bandit(self) -> bool:
        """Whether this decision ended pruning (the job's arms are set from now on)."""
        return self.job.bandit_start == self.trial.trial_number


def after_dispatch(
    job: CreatedJob,
    state: JobState,
    explorations: Iterable[TrialState] = (),
    windowed: WindowedCosts | None = None,
    *,
    profile: str | None = None,
    accumulates: bool = False,
    deliver: bool = False,
) -> Dispatched:
    """Start the job's next trial, on hardware ``profile``: choose its batch size (see
    `zeus_bso.policy.history.history_of` for the arguments). Once the job has two profiles,
    its epochs by profile (`JobState.by_profile`) convert its costs, and its bandit trials on
    ``profile`` stand for its bandit trials (see `zeus_bso.policy.profiles`). A run that
    ``accumulates`` gradients reaches any batch size with micro-batches: the profile's memory
    cap holds none back. A run that must ``deliver`` a model is judged by the target and
    ``max_epochs`` alone (`TrialState.must_deliver`).

    A pinned job's run gets the pinned batch size, and nothing is explored.

    Raises:
        NoConvergedBatchSizeError: pruning found no batch size that converges.
    """
    number = state.next_trial_number
    if state.pinned is not None:
        return _pinned(job, state, profile, accumulates, deliver)
    explorations = tuple(explorations)
    profiles = profiles_of(job, state)
    seen = state_on(job, state, profiles, profile)
    history = history_seen(job, state, seen, explorations, windowed, profiles, profile)
    ran_on = profile or next(iter(state.profiles), None)
    if ran_on is not None:
        cap = None if accumulates else state.memory_caps.get(ran_on)
        history = replace(history, memory_cap=cap, profile=ran_on)
        if profiles is not None and state.by_profile is not None:
            history = _on_a_new_profile(job, state, explorations, history, profiles, ran_on)
    history = _after_prior(job, state, explorations, history)
    dispatch = decide(job, history, rng_for(job, number), _horizon(job, state, seen))
    arms, start = state.arms, state.bandit_start
    if dispatch.arms is not None and arms is None:
        arms, start = dispatch.arms, number
    after = replace(state, next_trial_number=number + 1, arms=arms, bandit_start=start)
    if after.by_profile is not None and ran_on is not None and dispatch.kind is TrialKind.BANDIT:
        after = replace(after, by_profile=after.by_profile.with_bandit_trial(ran_on))
    trial = _dispatched_trial(number, dispatch, profile, accumulates, deliver)
    return Dispatched(after, trial, dispatch)


def _after_prior(
    job: CreatedJob, state: JobState, explorations: tuple[TrialState, ...], history: JobHistory
) -> JobHistory:
    """``history`` of a seeded job's bandit stage: with the extension it takes after its
    prior's round (the arms a cold walk would have given it: `zeus_bso.policy.priors.extension`),
    where it has none of its own, and the bandit trials its prior stands for
    (`zeus_bso.policy.priors.bandit_credit`)."""
    if state.prior is None or state.arms is None or history.probe is not None:
        return history
    tried = [t.batch_size for t in explorations if is_extension(t)]
    found = prior_extension(state.prior, state.arms, job.batch_sizes, state.stats, history, tried)
    settings = PruningSettings.of(job, history.memory_cap, history.profile)
    credit = bandit_credit(settings, state.prior, explorations)
    return replace(
        history,
        extension=history.extension or found,
        bandit_pulls=history.bandit_pulls + credit,
    )


def _pinned(
    job: CreatedJob, state: JobState, profile: str | None, accumulates: bool, deliver: bool
) -> Dispatched:
    """A pinned job's next trial: the pinned batch size, unless it is at or above the memory
    cap of the profile it runs on (a run that accumulates has none).

    Raises:
        PinnedOutOfMemoryError: the pinned size ran out of memory on this profile before.
    """
    assert state.pinned is not None
    number = state.next_trial_number
    pinned_on = profile or next(iter(state.profiles), None) or profile_key(job)
    cap = None if accumulates else state.memory_caps.get(pinned_on)
    if cap is not None and state.pinned >= cap:
        raise PinnedOutOfMemoryError(state.pinned, cap, pinned_on)
    pinned = Dispatch(state.pinned, TrialKind.PINNED, arms=state.arms)
    trial = _dispatched_trial(number, pinned, profile, accumulates, deliver)
    return Dispatched(replace(state, next_trial_number=number + 1), trial, pinned)


def _on_a_new_profile(
    job: CreatedJob,
    state: JobState,
    explorations: tuple[TrialState, ...],
    history: JobHistory,
    profiles: Profiles,
    ran_on: str,
) -> JobHistory:
    """``history`` with what a job of several hardware profiles knows of ``ran_on``: its
    bandit runs so far, and the arm to probe or the size to extend to there."""
    assert state.by_profile is not None
    pulls = state.by_profile.bandit_trials.get(ran_on, 0)
    history = replace(history, bandit_pulls=pulls)
    if not job.profile_probe or state.arms is None:
        return history
    if pulls <= 1:
        # The profile's second bandit run at most: a probe that ends without a report (a
        # batch size the new GPUs cannot run) is not dispatched again.
        history = replace(history, probe=probe_arm(profiles, ran_on, state.arms))
    if history.probe is None:
        tried = [t.batch_size for t in explorations if is_extension(t) and t.profile == ran_on]
        found = extension(
            profiles, ran_on, state.arms, job.batch_sizes, state.stats, history.observations, tried
        )
        history = replace(history, extension=found)
    return history


def _dispatched_trial(
    number: int, dispatch: Dispatch, profile: str | None, accumulates: bool, deliver: bool
) -> TrialState:
    """Trial ``number`` as ``dispatch`` starts it, with what its run was dispatched for (told
    to profile power limits, if at all, by the server afterwards)."""
    return TrialState(
        number,
        dispatch.batch_size,
        dispatch.kind,
        dispatch.round,
        profile=profile,
        accumulates=accumulates,
        power_profiling=False,
        must_deliver=deliver,
    )


def is_extension(trial: TrialState) -> bool:
    """Whether ``trial`` explored a batch size outside the arms on new hardware
    (`zeus_bso.policy.profiles.extension`): an exploration outside the pruning rounds. One
    that converges joins the arms."""
    return trial.kind is TrialKind.EXPLORATION and trial.round is None


def moved(state: JobState, trial: TrialState, profile: str) -> tuple[JobState, TrialState]:
    """A run that goes on on hardware ``profile`` (restarted on other GPUs): its trial there, and
    the job counting it there."""
    after = replace(trial, profile=profile)
    return counted_anew(state, trial, after), after


@dataclass(frozen=True, slots=True)
class Reported:
    """A report's outcome: the job and the trial after it, and the answer to the client."""

    job: JobState
    trial: TrialState
    answer: ReportResponse
    final: bool
    """Whether this report ended the trial (its cost is now in the job's statistics)."""


def _check_cumulative(trial: TrialState, *, time: float, energy: float, current_epoch: int) -> None:
    if trial.epochs is not None and current_epoch < trial.epochs:
        raise ReportMismatchError(
            f"current_epoch {current_epoch} is below the {trial.epochs} epochs already "
            f"reported for trial {trial.trial_number}; report cumulative values"
        )
    for name, value, before in (("time", time, trial.time), ("energy", energy, trial.energy)):
        if before is not None and value < before:
            raise ReportMismatchError(
                f"{name} {value:g} is below the {before:g} already reported for trial "
                f"{trial.trial_number}; time and energy are cumulative since the run began"
            )


class Measured(TypedDict):
    """A report's measurements (cumulative since its run began) and whether it is the run's
    last (``final``), as `after_report` takes them."""

    time: float
    energy: float
    metric: float
    current_epoch: int
    final: NotRequired[bool]
    why: NotRequired[str | None]
    diverged: NotRequired[bool]


def after_report(
    job: CreatedJob,
    state: JobState,
    trial: TrialState,
    *,
    time: float,
    energy: float,
    metric: float,
    current_epoch: int,
    final: bool = False,
    why: str | None = None,
    diverged: bool = False,
) -> Reported:
    """Judge a report of ``trial`` (cumulative time, energy and epochs since its run began);
    ``final``: its run stops after it of its own accord (`stopped_itself`; ``why``, in words);
    ``diverged``: so, because its training diverged, and ``metric`` is none (the trial keeps its
    last one, and its curve).

    The run's cost is priced with its own profile's ``max_power`` and judged against the
    early-stop reference in that profile's units (see `after_dispatch`). A report that ends the
    run folds its cost into the job's statistics and early-stop reference (`_ended`); one that
    does not renews the run (an abandoned trial is dispatched again). A job with two profiles
    counts the report's epoch in its `JobState.by_profile`.

    Raises:
        ReportMismatchError: fewer epochs, or less time or energy, than already reported.
    """
    priced = job_on(job, state, trial.profile)
    if trial.status is TrialStatus.REPORTED:
        return _already_reported(priced, state, trial)
    if trial.status in NOT_MEASURED:
        return _not_counted(state, trial)
    _check_cumulative(trial, time=time, energy=energy, current_epoch=current_epoch)
    cost = zeus_cost(energy, time, priced.eta_knob, priced.max_power)
    profiles = _measuring(job, state, trial, cost / current_epoch)
    seen = state_on(job, state, profiles, trial.profile)
    rules = _rules_for(job, trial)
    hib = rules.higher_is_better
    curve = trial.curve if diverged else extended(trial.curve, current_epoch, metric, hib)
    report = _report_of(rules, state, seen, trial, (curve, cost, metric, current_epoch))
    best = seen.best.cost if seen.best else None
    verdict = judge_report(rules, report, best, nothing_converged=best is None)
    if not (verdict.stop or trial.must_deliver):  # one that must deliver: the target alone
        verdict = _job_bound(job, state, seen, trial, report) or verdict
    if (final and not verdict.stop) or diverged:
        verdict = stopped_itself(rules, report, why)
    answer = answer_of(verdict)
    charged = verdict.cost if verdict.charged is None else verdict.charged
    metric_kept = trial.metric if diverged else metric
    measured = replace(trial, epochs=current_epoch, time=time, energy=energy, metric=metric_kept)
    measured = replace(measured, cost=charged, curve=curve)
    state = counted_anew(state, trial, measured)
    if not verdict.stop:
        return Reported(state, replace(measured, status=TrialStatus.DISPATCHED), answer, False)
    return _ended(rules, state, measured, verdict, answer, profiles)


def _measuring(
    job: CreatedJob, state: JobState, trial: TrialState, epoch_cost: float
) -> Profiles | None:
    """The job's hardware profiles (None: it has one), ``trial``'s report measuring its
    profile's cost of an epoch (``epoch_cost``) too."""
    profiles = profiles_of(job, state)
    if profiles is None:
        return None
    return profiles.measuring(trial.profile or profiles.base, trial.batch_size, epoch_cost)


def _rules_for(job: CreatedJob, trial: TrialState) -> StopRules:
    """The stop rules ``trial``'s reports are judged by: the job's, without a cost stop for a
    run that must deliver (a pinned one, or one `TrialState.must_deliver`)."""
    rules = StopRules.of(job)
    if trial.kind is TrialKind.PINNED or trial.must_deliver:
        return replace(rules, beta_knob=None, prune_cost_ratio=None, run_cost_ratio=None)
    return rules


def with_stop_settings(job: CreatedJob, state: JobState) -> JobState:
    """The job's state under ``job``'s stop settings (registered again with another
    ``early_stop_reference``): its early-stop reference made again from its batch sizes'
    converged runs, as its next final report would make it."""
    converged = {size: entry.converged for size, entry in state.stats.items()}
    return replace(state, best=best_reference(StopRules.of(job), converged))


NOT_MEASURED = frozenset({TrialStatus.INFEASIBLE})
"""Ended statuses whose batch size cannot train on the run's GPUs: a late report of such a
trial (a rank that went on, a delivery that came after) is answered, and not counted. (A
``released`` trial is different: a run resumed from a checkpoint continues it and reports.)"""


def _not_counted(state: JobState, trial: TrialState) -> Reported:
    """The answer to a late report of a trial that ended ``infeasible``: stop; the trial stays
    as it ended and nothing is counted."""
    answer = ReportResponse(
        stop_train=True,
        converged=False,
        message=(
            f"Trial({trial.trial_number}) ended as {trial.status.value}; its report is not counted."
        ),
    )
    return Reported(state, trial, answer, final=False)


def _already_reported(priced: CreatedJob, state: JobState, trial: TrialState) -> Reported:
    """The answer to a report of a trial that already ended: its final verdict again."""
    spent = trial.cost  # what it cost, as its final answer said (not a predicted cost)
    if trial.energy is not None and trial.time is not None:
        spent = zeus_cost(trial.energy, trial.time, priced.eta_knob, priced.max_power)
    answer = ReportResponse(
        stop_train=True,
        converged=bool(trial.converged),
        message=f"Result for this trial({trial.trial_number}) is already reported.",
        cost=spent,
    )
    return Reported(state, trial, answer, final=False)


def _job_bound(
    job: CreatedJob, state: JobState, seen: JobState, trial: TrialState, report: Report
) -> Verdict | None:
    """The stop of a run that the job's own bounds end, beyond the stop rules of a run: a run
    of a prior's walk past what the prior predicted (`over_prior`), or an exploration past what
    the job's ``expected_recurrences`` allow (`over_horizon`); None: neither ends it."""
    if trial.round == PRIOR_ROUND and state.prior is not None:
        size, default = trial.batch_size, job.default_batch_size
        since = trial.since(report.cost, report.epoch)
        bound = over_prior(state.prior, seen.stats, size, report.cost, report.epoch, default, since)
        if bound is not None:
            return bound
    horizon = _horizon(job, state, seen) if report.exploring else None
    return None if horizon is None else over_horizon(horizon, report)


def _horizon(job: CreatedJob, state: JobState, seen: JobState) -> Horizon | None:
    """Where a job with ``expected_recurrences`` stands against its budget, from the stats of
    the profile it runs on (``seen``) and its prior (None: the job set no horizon)."""
    if job.expected_recurrences is None:
        return None
    return Horizon.of(job.expected_recurrences, seen.stats, job.default_batch_size, state.prior)


def _report_of(
    rules: StopRules,
    state: JobState,
    seen: JobState,
    trial: TrialState,
    reported: tuple[Curve, float, float, int],
) -> Report:
    """The report (its curve, cost, metric and epoch) as the stop rules read it. With
    ``learning_curve_stop``, from a run's second report on, it carries the epochs the run still
    needs (predicted from the kept curves; for a run of a prior's walk, scaled by the related
    job's epochs: `zeus_bso.policy.priors.epoch_scales`; for an exploration, at least its stall:
    `outlasting_its_stall`), what an epoch costs (the cheaper of its mean epoch and its epochs
    since the last report: its first may hold a compile), what a fresh run costs (`fresh_run_cost`)
    and how much dearer its epochs are than its size's converged runs' (`run_load`), both from
    ``seen`` (the job's statistics in the run's profile's units). With ``max_run_cost_ratio``, a
    run at another size than the default carries the default's measured cost (in those units)."""
    curve, cost, metric, current_epoch = reported
    left, epoch_cost, fresh, load = None, None, None, 1.0
    if rules.learning_curve and trial.epochs and trial.cost is not None:
        kept = {size: entry.curves for size, entry in state.stats.items()}
        prior = state.prior if trial.round == PRIOR_ROUND else None
        scales = None if prior is None else epoch_scales(prior, trial.batch_size)
        hib = rules.higher_is_better
        left = epochs_left(kept, trial.batch_size, curve, hib, current_epoch, scales)
        if left is not None and trial.kind is TrialKind.EXPLORATION:
            left = outlasting_its_stall(left, curve, current_epoch)
        since = (cost - trial.cost) / max(current_epoch - trial.epochs, 1)
        epoch_cost = min(cost / current_epoch, since)
        fresh = None if left is None else fresh_run_cost(seen.stats)
        load = run_load(seen.stats.get(trial.batch_size), epoch_cost)
    default_cost, size = None, rules.default_batch_size
    if rules.run_cost_ratio is not None and size is not None and size != trial.batch_size:
        default = seen.stats.get(size)
        default_cost = None if default is None else default.converged.mean
    return Report(
        trial.batch_size,
        cost,
        metric,
        current_epoch,
        trial.kind is TrialKind.EXPLORATION,
        left,
        epoch_cost,
        fresh,
        default_cost,
        load,
    )


def _ended(
    rules: StopRules,
    state: JobState,
    measured: TrialState,
    verdict: Verdict,
    answer: ReportResponse,
    profiles: Profiles | None,
) -> Reported:
    """A run's final report: the trial ends, and its cost (in the job's first profile's units)
    joins the job's statistics and early-stop reference."""
    ended = replace(
        measured,
        status=TrialStatus.REPORTED,
        converged=verdict.converged,
        message=verdict.message,
    )
    base_cost, paid = ended.cost, verdict.cost
    assert base_cost is not None
    if profiles is not None:
        factor = profiles.factor(measured.batch_size, measured.profile, profiles.base)
        base_cost, paid = base_cost * factor, paid * factor
    stats, base_best = fold_final_report(
        rules,
        state.stats,
        measured.batch_size,
        base_cost,
        verdict.converged,
        measured.curve if rules.learning_curve else None,
        paid,
    )
    arms = state.arms
    if arms is not None and is_extension(ended) and verdict.converged:
        arms = tuple(sorted({*arms, ended.batch_size}))
    after = replace(state, stats=stats, best=base_best, arms=arms)
    return Reported(after, ended, answer, final=True)
