"""The job's state machine: what a dispatch, a report, the end of a run and the expiry of its
lease do to a job and its trials (a report's judgement: `zeus_bso.policy.reporting`).

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

from zeus_bso.errors import PinnedOutOfMemoryError, ReportMismatchError
from zeus_bso.policy.decide import decide, rng_for
from zeus_bso.policy.history import history_seen
from zeus_bso.policy.horizon import Horizon
from zeus_bso.policy.priors import bandit_credit
from zeus_bso.policy.priors import extension as prior_extension
from zeus_bso.policy.profiles import (
    Profiles,
    WindowedCosts,
    counted_anew,
    extension,
    probe_arm,
    profiles_of,
    state_on,
)
from zeus_bso.policy.pruning import PruningSettings
from zeus_bso.policy.types import Dispatch, JobHistory, JobState, TrialState
from zeus_bso.spec import CreatedJob, TrialKind, TrialStatus, profile_key


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
    size, unless a run of that size or a larger one reported on the profile and is not in doubt
    (`JobState.fits_known`): then the error need not be the batch size's, no cap is set, and
    its fit is in doubt (`ran_out_where_it_fit`). A trial that is not open is left, and so is
    the job."""
    after = after_event(trial, Event.OUT_OF_MEMORY)
    if after.status is trial.status:
        return state, trial
    profile = _profile_of(job, state, trial)
    if any(state.fits_known(profile, b) for b in job.batch_sizes if b >= trial.batch_size):
        return ran_out_where_it_fit(job, state, trial), after
    cap = min(state.memory_caps.get(profile, trial.batch_size), trial.batch_size)
    doubts = {p: d for p, d in state.memory_doubts.items() if p != profile or d < cap}
    return replace(
        state, memory_caps={**state.memory_caps, profile: cap}, memory_doubts=doubts
    ), after


def ran_out_where_it_fit(job: CreatedJob, state: JobState, trial: TrialState) -> JobState:
    """The job after the run of an open ``trial`` ran out of memory while it trained at a batch
    size known to fit on its profile (`JobState.fits_known`; its main process releases the
    trial, another process marks it infeasible): the error need not be the size's (a leak,
    another process on the GPU), so no cap is set, but the size's fit is in doubt there
    (`JobState.memory_doubts`): a run of it is tried first, and a second error sets the cap.
    Where the model, its data or its precision needs more memory than when the size trained,
    the size would otherwise be dispatched, and run out, at every run."""
    if trial.status not in OPEN:
        return state
    profile = _profile_of(job, state, trial)
    doubt = min(state.memory_doubts.get(profile, trial.batch_size), trial.batch_size)
    return replace(state, memory_doubts={**state.memory_doubts, profile: doubt})


def fit_shown(job: CreatedJob, state: JobState, trial: TrialState) -> JobState:
    """The job after the final report of ``trial``: a run at or above its profile's memory
    doubt trained to its end, so the doubt is cleared (`JobState.memory_doubts`). An epoch's
    report does not: a run whose longest batches come late (samples of many lengths) may run
    out after it."""
    profile = _profile_of(job, state, trial)
    doubt = state.memory_doubts.get(profile)
    if doubt is None or trial.batch_size < doubt:
        return state
    doubts = {p: d for p, d in state.memory_doubts.items() if p != profile}
    return replace(state, memory_doubts=doubts)


def _profile_of(job: CreatedJob, state: JobState, trial: TrialState) -> str:
    """The hardware profile ``trial`` runs on (a trial on the job's first keeps none)."""
    return trial.profile or next(iter(state.profiles), None) or profile_key(job)


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
    profile = _profile_of(job, state, trial)
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
    dispatch = decide(job, history, rng_for(job, number), horizon_of(job, state, seen))
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


def horizon_of(job: CreatedJob, state: JobState, seen: JobState) -> Horizon | None:
    """Where a job with ``expected_recurrences`` stands against its budget, from the stats of
    the profile it runs on (``seen``) and its prior (None: the job set no horizon)."""
    if job.expected_recurrences is None:
        return None
    return Horizon.of(job.expected_recurrences, seen.stats, job.default_batch_size, state.prior)
