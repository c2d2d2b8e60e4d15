"""One orchestration of the policy over a `JobStore`: gather what a decision reads, call the pure
state machine (`zeus_bso.policy.machine`), write what comes back.

The server (inside its transaction, with the job row locked), the simulator and the read views
all go through here, so they read the same history the same way; the rules of what to read
(the explorations only while pruning, the windowed costs only with a ``window_size``, the
count of a job's epochs by profile once, when it has two hardware profiles and none kept yet)
live here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Unpack

from zeus_bso.errors import NoConvergedBatchSizeError
from zeus_bso.policy.history import history_of
from zeus_bso.policy.machine import (
    Dispatched,
    after_dispatch,
    fit_shown,
    micro_batch_out_of_memory,
    out_of_memory,
)
from zeus_bso.policy.profiles import WindowedCosts, profiles_of, state_on
from zeus_bso.policy.reporting import Measured, Reported, after_report
from zeus_bso.policy.store import JobStore
from zeus_bso.policy.types import JobHistory, JobState, TrialState
from zeus_bso.spec import CreatedJob, profile_key


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the state machine reads of a job's stored trials besides its `JobState`."""

    explorations: Sequence[TrialState] = ()
    """The pruning explorations (while the job prunes)."""
    windowed: WindowedCosts | None = None
    """With a ``window_size``: the latest costs of each arm (each batch size while pruning)."""


def inputs(
    store: JobStore, job: CreatedJob, state: JobState, *, explorations: bool = True
) -> Inputs:
    """Read what a decision needs besides the job's state (``explorations=False``: all but the
    explorations, for a reader that does not decide)."""
    windowed = None
    if job.window_size > 0:
        sizes = state.arms if state.arms is not None else job.batch_sizes
        windowed = store.latest_costs(sizes, job.window_size)
    return Inputs(
        explorations=store.explorations() if explorations and _explores(job, state) else (),
        windowed=windowed,
    )


@dataclass(frozen=True, slots=True)
class Reading:
    """A job's state (`counted`) and the `Inputs` of a decision, read once: the views of a
    reader that shows several (`decision_view`, `next_run`) share it."""

    state: JobState
    inputs: Inputs


def reading(store: JobStore, job: CreatedJob, state: JobState | None = None) -> Reading:
    """Read a job's state (``state``: the one already read) and a decision's inputs, once."""
    found = counted(store, store.state() if state is None else state)
    return Reading(found, inputs(store, job, found))


def _explores(job: CreatedJob, state: JobState) -> bool:
    """Whether a decision reads the job's explorations: while it prunes, once it has two
    hardware profiles, what it explored on each (`zeus_bso.policy.profiles.extension`), and
    after a prior's walk, what it explored beyond (`zeus_bso.policy.priors.extension`)."""
    several = job.profile_probe and len(state.profiles) >= 2
    return state.arms is None or several or state.prior is not None


def counted(store: JobStore, state: JobState) -> JobState:
    """The job's state with its epochs and bandit trials by profile (`JobState.by_profile`),
    counted from its trials if it has two profiles and keeps none yet: once, when its second
    profile comes (or after an upgrade from a version that did not keep them); from then on
    the state machine keeps them with every report."""
    if len(state.profiles) < 2 or state.by_profile is not None:
        return state
    return replace(state, by_profile=store.by_profile(next(iter(state.profiles))))


def dispatch(
    store: JobStore,
    job: CreatedJob,
    profile: str,
    *,
    accumulates: bool = False,
    deliver: bool = False,
) -> Dispatched:
    """Start the job's next trial, for a run on hardware ``profile`` (that ``accumulates``
    gradients: no size is held back by the profile's memory cap), and store it.

    Raises:
        NoConvergedBatchSizeError: pruning found no batch size that converges.
    """
    state = counted(store, store.state())
    read = inputs(store, job, state)
    step = after_dispatch(
        job,
        state,
        read.explorations,
        read.windowed,
        profile=profile,
        accumulates=accumulates,
        deliver=deliver,
    )
    store.add_trial(step.trial, step.job)
    return step


def next_run(
    store: JobStore, job: CreatedJob, profile: str, read: Reading | None = None
) -> Dispatched | NoConvergedBatchSizeError:
    """What the job's next dispatch for a run on ``profile`` would decide now, for a reader: the
    dispatch (stored nowhere), or the error that would refuse it (no batch size converges, or
    none fits). The run is taken to be like the job's newest: one that accumulates gradients
    reaches any size with micro-batches, past the memory cap. In the bandit stage the arm is one
    draw of the next trial's random source. ``read``: the job as already read (`reading`)."""
    if read is None:
        read = reading(store, job)
    state, given = read.state, read.inputs
    newest = store.trial(state.next_trial_number - 1) if state.next_trial_number > 1 else None
    accumulates = newest is not None and bool(newest.accumulates)
    try:
        return after_dispatch(
            job,
            state,
            given.explorations,
            given.windowed,
            profile=profile,
            accumulates=accumulates,
        )
    except NoConvergedBatchSizeError as err:
        return err


def report(
    store: JobStore, job: CreatedJob, trial: TrialState, **measured: Unpack[Measured]
) -> Reported:
    """Judge a report of ``trial`` and store what changed: the trial, and after its final
    report the job's statistics too (``final``: see `after_report`).

    Raises:
        ReportMismatchError: fewer epochs, or less time or energy, than already reported.
    """
    step = after_report(job, counted(store, store.state()), trial, **measured)
    if step.final:
        step = replace(step, job=fit_shown(job, step.job, trial))
    if step.final or step.trial != trial:
        store.save_trial(step.trial, step.job)
    return step


def ran_out_of_memory(store: JobStore, job: CreatedJob, trial: TrialState) -> TrialState:
    """The run of ``trial`` ran out of memory: store the trial (``infeasible`` if it was open)
    and its profile's memory cap. Returns the trial."""
    state = store.state()
    after_state, after = out_of_memory(job, state, trial)
    if after != trial or after_state != state:
        store.save_trial(after, after_state)
    return after


def micro_batch_ran_out_of_memory(
    store: JobStore, job: CreatedJob, trial: TrialState, micro_batch_size: int
) -> bool:
    """The run of ``trial``, which accumulates gradients, ran out of memory at
    ``micro_batch_size``: store its profile's lower memory cap (the trial goes on). Returns
    whether the cap changed."""
    state = store.state()
    after = micro_batch_out_of_memory(job, state, trial, micro_batch_size)
    if after == state:
        return False
    store.save_trial(trial, after)
    return True


def decision_view(
    store: JobStore, job: CreatedJob, state: JobState, read: Reading | None = None
) -> tuple[JobState, JobHistory]:
    """What a decision for a run on the job's current profile reads, for a reader: the job's
    statistics and early-stop reference in that profile's cost units, and its history (windowed
    or running statistics). ``read``: the job as already read (`reading`), in place of
    ``state``."""
    profile = profile_key(job)
    if read is None:
        state = counted(store, state)
        windowed = inputs(store, job, state, explorations=False).windowed
    else:
        state, windowed = read.state, read.inputs.windowed
    profiles = profiles_of(job, state)
    return (
        state_on(job, state, profiles, profile),
        history_of(job, state, (), windowed, profiles, profile),
    )
