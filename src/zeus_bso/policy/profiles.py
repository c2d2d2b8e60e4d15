"""Hardware profiles: one job trained on several kinds or numbers of GPUs.

What a batch size needs to reach the target (how many epochs, whether it converges at all) is a
property of the model, the data and the optimizer; what an epoch costs is a property of the
hardware, and of its power limit, which prices time in the cost. So a job keeps one set of
statistics, in the cost units of its first profile (the base), and converts a cost between two
profiles by the ratio of their costs per epoch for that batch size: measured (the mean energy
and time per epoch over trials at their latest report, priced with the profile's power limit)
where both profiles ran it, and otherwise predicted from the ratios measured at the batch sizes
both ran, as a power law in the batch size (`Profiles.ratio_at`): one GPU may gain more than
another from large batches, which moves the cheapest batch size. Before two profiles share any
batch size the ratio is taken as 1: the arms keep their order, only the scale of costs is off,
and the first report of a run on the new profile measures it.

A converted cost is a prediction until its batch size has run on the profile: in the bandit it
counts as one observation, not as all it was converted from, and the bandit samples again for
``bandit_exploit_after`` trials on each profile before it only exploits. So a batch size whose
ratio differs from the others' is found on the new hardware at the price of a few runs, not
the whole exploration again.

A job with one profile converts nothing: its decisions are those of a job without profiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import fmean
from typing import TypeAlias

from zeus_bso.errors import TooManyProfilesError
from zeus_bso.policy.cost import StopRules, best_reference, zeus_cost
from zeus_bso.policy.pruning import neighbours
from zeus_bso.policy.types import BatchSizeStats, ByProfile, CostStats, JobState, TrialState
from zeus_bso.spec import CreatedJob, GpuConfig, TrialKind, gpu_of, profile_key

EpochCosts: TypeAlias = Mapping[tuple[str, int], float]
"""The mean cost of an epoch by (profile, batch size), from the trials' reports."""

WindowedCosts: TypeAlias = Mapping[int, Sequence[tuple[float, "str | None"]]]
"""Each batch size's most recent final costs, oldest first, each with its trial's profile."""


@dataclass(frozen=True, slots=True)
class Profiles:
    """A job's profiles as the conversion of costs needs them: the base and the measured cost
    of an epoch of each (profile, batch size) that reported."""

    base: str
    epoch_costs: EpochCosts = field(default_factory=dict)

    def shared_sizes(self, dst: str, src: str) -> list[int]:
        """The batch sizes whose cost of an epoch both profiles measured."""
        return [
            size
            for (profile, size) in self.epoch_costs
            if profile == dst and (src, size) in self.epoch_costs
        ]

    def ratio_at(self, batch_size: int, dst: str, src: str) -> float | None:
        """How many times an epoch of ``batch_size`` on ``dst`` is predicted to cost what one on
        ``src`` does, from the ratios measured at the batch sizes both ran (None where they share
        none): the least-squares power law through them (the log of the ratio linear in the log
        of the batch size), its exponent within +-`MAX_RATIO_EXPONENT`. With one shared batch
        size, that size's ratio at every size."""
        points = [
            (math.log(size), math.log(ratio))
            for size in self.shared_sizes(dst, src)
            if _usable(ratio := self.epoch_costs[(dst, size)] / self.epoch_costs[(src, size)])
        ]
        if not points:
            return None
        mean_x = fmean(x for x, _ in points)
        mean_y = fmean(y for _, y in points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        exponent = 0.0
        if spread > 0.0:
            exponent = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
            exponent = max(-MAX_RATIO_EXPONENT, min(MAX_RATIO_EXPONENT, exponent))
        return _usable_or_none(math.exp(mean_y + exponent * (math.log(batch_size) - mean_x)))

    def factor(self, batch_size: int, src: str | None, dst: str | None) -> float:
        """What a cost of ``batch_size`` on ``src`` is multiplied by to be one on ``dst``
        (``None``: the base)."""
        src, dst = src or self.base, dst or self.base
        if src == dst:
            return 1.0
        measured_src = self.epoch_costs.get((src, batch_size))
        measured_dst = self.epoch_costs.get((dst, batch_size))
        if measured_src and measured_dst and _usable(measured_dst / measured_src):
            return measured_dst / measured_src
        ratio = self.ratio_at(batch_size, dst, src)
        return 1.0 if ratio is None else ratio

    def measuring(self, profile: str, batch_size: int, epoch_cost: float) -> Profiles:
        """These profiles with ``epoch_cost`` as the measured cost of an epoch of
        ``batch_size`` on ``profile``, unless one is measured already."""
        key = (profile, batch_size)
        if key in self.epoch_costs or not epoch_cost > 0.0:
            return self
        return replace(self, epoch_costs={**self.epoch_costs, key: epoch_cost})


def probe_arm(profiles: Profiles | None, profile: str | None, arms: Sequence[int]) -> int | None:
    """The arm a run on ``profile`` should take to measure how costs convert there, or None.

    While a profile's cost ratio to the base is measured at one batch size, `Profiles.ratio_at`
    predicts that ratio at every size: the arms keep the order they had on the base. A GPU that
    gains more than the base from large batches (or less) reorders them, and the bandit, which
    ranks the arms by their converted costs, would not run another arm to find out. One run of
    the arm nearest the measured size (in log batch size) measures a second ratio, which gives
    the power law its slope. The nearest, because it is the likeliest to be cheap where the
    order holds (a neighbour of the best): on the trace's transfers the farthest cost more for
    the same finding (``benchmarks/regret.py``). Of two as near, the smaller: new GPUs may have
    less memory, and a batch size they cannot run wastes the probe. It is judged as any bandit
    run. Only an arm the base measured gives a ratio (not one that joined the arms on another
    profile, after it ran out of memory on the base)."""
    if profiles is None or profile is None or profile == profiles.base:
        return None
    shared = profiles.shared_sizes(profile, profiles.base)
    if len(shared) != 1:
        return None
    (measured,) = shared
    others = [a for a in arms if a != measured and (profiles.base, a) in profiles.epoch_costs]
    if not others:
        return None
    return min(others, key=lambda arm: (abs(math.log(arm / measured)), arm))


def extension(
    profiles: Profiles | None,
    profile: str | None,
    arms: Sequence[int],
    batch_sizes: Sequence[int],
    stats: Mapping[int, BatchSizeStats],
    observations: Mapping[int, CostStats],
    tried: Iterable[int],
) -> int | None:
    """A batch size outside the arms that a run on ``profile`` should explore, or None.

    The arms are what pruning kept on the job's first GPUs; on others the cheapest batch size
    may be one it never ran (a stride stepped over it) or stopped for its cost there. Once a
    profile's costs are measured at two batch sizes (`probe_arm`), and once the arm cheapest
    there by the converted costs has run there, its neighbours among the job's batch sizes are
    explored there, one run each, the one the measured ratios favour most (the lower predicted
    cost ratio) first: a neighbour that is not an arm, not ``tried`` on the profile, and may
    cost less than the best there (`may_beat`: not one that ran and never converged, on any
    GPU, since how many epochs a batch size needs does not depend on the hardware; not one
    whose converged runs, converted, cost more). One that converges joins the arms
    (`zeus_bso.policy.machine`), so the walk goes on from a new cheapest. Where no arm the base
    measured is left to probe (a job of one arm), once its cheapest arm has run there, its
    neighbours are explored alike (a size that ran out of memory on the base GPUs and fits on
    larger ones is one; it stayed untried there for good)."""
    if profiles is None or profile is None or profile == profiles.base:
        return None
    if probe_arm(profiles, profile, arms) is not None:
        return None  # the probe measures a second ratio first
    seen = [arm for arm in arms if arm in observations and observations[arm].count]
    if not seen:
        return None
    best = min(seen, key=lambda arm: (observations[arm].mean, arm))
    if (profile, best) not in profiles.epoch_costs:
        return None  # the bandit runs it first
    done = set(tried)

    def ratio(size: int) -> float:
        predicted = profiles.ratio_at(size, profile, profiles.base)
        return math.inf if predicted is None else predicted

    candidates = [
        size
        for size in neighbours(sorted(batch_sizes), best)
        if size not in arms
        and size not in done
        and may_beat(stats.get(size), observations.get(size), observations[best].mean)
    ]
    return min(candidates, key=lambda size: (ratio(size), size), default=None)


def may_beat(entry: BatchSizeStats | None, seen: CostStats | None, best: float) -> bool:
    """Whether a batch size outside the arms may cost less than ``best`` on a profile, from
    its statistics (``entry``, any profile's runs) and its costs converted to the profile
    (``seen``): not if it ran and never converged; if it converged, whether its converted mean
    is below; if it never ran (or only runs stopped early), it may."""
    if entry is None or not entry.reports:
        return True
    if not entry.converged_count:
        return False
    return seen is None or not seen.count or seen.mean < best


MAX_RATIO_EXPONENT = 1.0
"""The steepest power law in the batch size that `Profiles.ratio_at` fits to two profiles' cost
ratios. An epoch of a batch size b costs (steps per epoch, 1/b) x (cost of a step); between a
GPU whose step costs the same at every b (latency-bound) and one whose step costs in proportion
to b (throughput-bound) the ratio changes as b itself: exponent 1, the physical extreme. Fitted
to nothing: no scenario of ``benchmarks/regret.py`` reaches it (0.5 and no bound at all give the
same figures)."""

MAX_PROFILE_FACTOR = 1e3
"""The largest ratio of two profiles' costs per epoch that converts costs (and its inverse the
smallest). Real GPUs differ by far less; a ratio beyond it comes from a broken reading (a
near-zero energy) and would carry a cost past the largest float (inf, or a 500 on PostgreSQL):
it counts as unmeasured. With the physical bounds on reports (`zeus_bso.spec`), every converted
cost and its square stay finite."""


def _usable(ratio: float) -> bool:
    """Whether a ratio of costs can convert costs: within `MAX_PROFILE_FACTOR` both ways."""
    return 1.0 / MAX_PROFILE_FACTOR <= ratio <= MAX_PROFILE_FACTOR


def _usable_or_none(ratio: float) -> float | None:
    return ratio if _usable(ratio) else None


MAX_PROFILES = 32
"""The most hardware profiles one job may have."""


def with_profile(job: CreatedJob, state: JobState, gpu: GpuConfig) -> JobState:
    """The job's state knowing ``gpu``'s profile. A job's first profile is its configuration's;
    a job that knows only that one keeps ``profiles`` empty.

    Raises:
        TooManyProfilesError: the job has `MAX_PROFILES` profiles already.
    """
    key = profile_key(gpu)
    if key in state.profiles or (not state.profiles and key == profile_key(job)):
        return state
    known = dict(state.profiles) or {profile_key(job): gpu_of(job)}
    if len(known) >= MAX_PROFILES:
        raise TooManyProfilesError(
            f"job {job.job_id} has {len(known)} hardware profiles already, the most a job may "
            f"have; {key} would be another. Is max_power the same for every run on the same "
            "GPUs? (It is the sum of the GPUs' power limits.) Otherwise use a new job_id."
        )
    known[key] = gpu
    return replace(state, profiles=known)


def registered_on(job: CreatedJob, state: JobState, gpu: GpuConfig) -> tuple[CreatedJob, JobState]:
    """The job and its state after a registration on ``gpu``: its configuration holds those
    GPUs (the current profile from now on) and its state knows their profile.

    Raises:
        TooManyProfilesError: see `with_profile`.
    """
    return job.model_copy(update=gpu.model_dump()), with_profile(job, state, gpu)


def profiles_of(job: CreatedJob, state: JobState) -> Profiles | None:
    """The job's profiles for converting costs, each (profile, batch size)'s mean epoch
    (`JobState.by_profile`) priced with its profile's ``max_power``; None while it has one
    (nothing to convert).

    Raises:
        ValueError: the job has two profiles but nobody counted its epochs (see
            `zeus_bso.policy.orchestration`).
    """
    if len(state.profiles) < 2:
        return None
    if state.by_profile is None:
        raise ValueError("a job with two hardware profiles needs its epochs by profile counted")
    costs = {}
    for (profile, size), (energy, time) in state.by_profile.readings().items():
        priced = job_on(job, state, profile)
        cost = zeus_cost(energy, time, priced.eta_knob, priced.max_power)
        if cost > 0.0:
            costs[(profile, size)] = cost
    return Profiles(next(iter(state.profiles)), costs)


def epoch_of(trial: TrialState, base: str) -> tuple[str, int, float, float] | None:
    """A trial's epoch as `ByProfile` sums it: its profile (``base`` for one stored without),
    batch size, and the energy and time of its mean epoch at its latest report (None before it
    reported an epoch with energy)."""
    if not trial.epochs or trial.energy is None or trial.time is None:
        return None
    profile = trial.profile or base
    return profile, trial.batch_size, trial.energy / trial.epochs, trial.time / trial.epochs


def count_by_profile(trials: Iterable[TrialState], base: str) -> ByProfile:
    """A job's `ByProfile` counted from its trials, in the order given (by number, so that every
    store adds the same numbers in the same order)."""
    counted = ByProfile()
    for trial in trials:
        counted = counted.with_epoch(None, epoch_of(trial, base))
        if trial.kind is TrialKind.BANDIT:
            counted = counted.with_bandit_trial(trial.profile or base)
    return counted


def counted_anew(state: JobState, before: TrialState, after: TrialState) -> JobState:
    """The job's `ByProfile` with a trial changed from ``before`` to ``after`` (a report, or a
    run moved to other GPUs); unchanged for a job that keeps none."""
    by = state.by_profile
    if by is None or not state.profiles:
        return state
    base = next(iter(state.profiles))
    by = by.with_epoch(epoch_of(before, base), epoch_of(after, base))
    if before.kind is TrialKind.BANDIT and before.profile != after.profile:
        by = by.with_bandit_trial(before.profile or base, -1)
        by = by.with_bandit_trial(after.profile or base)
    return replace(state, by_profile=by)


def job_on(job: CreatedJob, state: JobState, profile: str | None) -> CreatedJob:
    """The job's configuration with ``profile``'s GPUs (``None``: the first), whose
    ``max_power`` prices a run's time (the configuration holds the profile registered last)."""
    if profile is None:
        profile = next(iter(state.profiles), None)
    gpu = state.profiles.get(profile) if profile is not None else None
    if gpu is None or profile == profile_key(job):
        return job
    return job.model_copy(update=gpu.model_dump())


UNMEASURED_WEIGHT = 1
"""How many observations a batch size's converted costs count as on a profile it has not run on
(chosen on the transfer scenario of ``benchmarks/regret.py``)."""


def state_on(
    job: CreatedJob, state: JobState, profiles: Profiles | None, profile: str | None
) -> JobState:
    """The job's statistics and early-stop reference in ``profile``'s cost units."""
    if profiles is None or profile in (None, profiles.base):
        return state
    stats = {}
    for size, entry in state.stats.items():
        scaled = entry.scaled(profiles.factor(size, profiles.base, profile))
        if (profile, size) not in profiles.epoch_costs and scaled.reports > UNMEASURED_WEIGHT:
            weight = UNMEASURED_WEIGHT  # the same mean and spread, fewer observations
            m2 = scaled.costs.variance * weight
            scaled = replace(scaled, reports=weight, m2_cost=m2)
        stats[size] = scaled
    best = best_reference(
        StopRules.of(job), {size: entry.converged for size, entry in stats.items()}
    )
    return replace(state, stats=stats, best=best)


def trial_on(trial: TrialState, profiles: Profiles | None, profile: str | None) -> TrialState:
    """The trial with its cost in ``profile``'s units."""
    if profiles is None or trial.cost is None:
        return trial
    factor = profiles.factor(trial.batch_size, trial.profile, profile)
    return trial if factor == 1.0 else replace(trial, cost=trial.cost * factor)


def windowed_on(
    windowed: WindowedCosts, profiles: Profiles | None, profile: str | None
) -> dict[int, CostStats]:
    """The statistics of each batch size's windowed costs in ``profile``'s units."""
    if profiles is None:
        return {size: CostStats.of(cost for cost, _ in costs) for size, costs in windowed.items()}
    result = {}
    for size, costs in windowed.items():
        if profile not in (None, profiles.base) and (profile, size) not in profiles.epoch_costs:
            costs = costs[-UNMEASURED_WEIGHT:]  # a prediction: see `state_on`
        result[size] = CostStats.of(c * profiles.factor(size, p, profile) for c, p in costs)
    return result
