"""The values the policy reads and returns. All immutable; none touches I/O."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeAlias

from zeus_bso.policy.curves import CURVES_KEPT, Curve
from zeus_bso.spec import GpuConfig, StopReason, TrialKind, TrialStatus


class Stage(StrEnum):
    """Where a job is in its life."""

    PRUNING = "pruning"
    BANDIT = "bandit"
    PINNED = "pinned"
    """Every run gets the pinned batch size: neither stage's, until the job is unpinned."""


@dataclass(frozen=True, slots=True)
class CostStats:
    """Running count, mean and sum of squared deviations (Welford) of observed costs."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, cost: float) -> CostStats:
        """Return the statistics with one more observation."""
        count = self.count + 1
        delta = cost - self.mean
        mean = self.mean + delta / count
        return CostStats(count, mean, self.m2 + delta * (cost - mean))

    @classmethod
    def of(cls, costs: Iterable[float]) -> CostStats:
        """Statistics of the given costs."""
        stats = cls()
        for cost in costs:
            stats = stats.add(cost)
        return stats

    @property
    def variance(self) -> float:
        """Population variance (0 with fewer than two observations)."""
        return self.m2 / self.count if self.count > 1 else 0.0

    def scaled(self, factor: float) -> CostStats:
        """The statistics of the same costs, each multiplied by ``factor``."""
        return CostStats(self.count, self.mean * factor, self.m2 * factor * factor)


Arms: TypeAlias = tuple[int, ...]
"""The batch sizes a bandit chooses among, ascending."""

Observations: TypeAlias = Mapping[int, CostStats]
"""Each observed arm's cost statistics (an arm not observed is absent)."""


@dataclass(frozen=True, slots=True)
class TrialState:
    """One trial (one run of the job) as the policy sees it: what it was dispatched for and what
    its reports said. The server stores it as a trial row; the simulator keeps it in memory."""

    trial_number: int
    batch_size: int
    kind: TrialKind
    round: int | None = None
    """Pruning round of an exploration; ``None`` for other kinds."""
    status: TrialStatus = TrialStatus.DISPATCHED
    epochs: int | None = None
    """Epochs reported so far; ``None`` before the first report."""
    time: float | None = None
    energy: float | None = None
    metric: float | None = None
    cost: float | None = None
    converged: bool | None = None
    message: str | None = None
    profile: str | None = None
    """The hardware profile the run trains on (`zeus_bso.spec.profile_key`); ``None``: the job's
    first profile."""
    curve: Curve = ()
    """Its learning curve so far (see `zeus_bso.policy.curves`)."""
    accumulation_steps: int | None = None
    """Micro-batches its run accumulated an optimizer step (None: one, or not said): the
    batch size was reached by gradient accumulation, at the micro-batch's speed."""
    accumulates: bool | None = None
    """Whether its run said it accumulates gradients when it was dispatched or resumed: only
    such a run sends a micro-batch that ran out of memory. ``None``: not known (a trial stored
    before the server kept it)."""
    power_profiling: bool | None = None
    """Whether its run was told to profile power limits: only such a run sends a power
    profile. ``None``: not known (a trial stored before the server kept it)."""
    must_deliver: bool = False
    """Whether its run must deliver a model (the last attempt of `until_converged`): it stops
    only at the target or ``max_epochs``, never on its cost, as a pinned job's runs."""
    resumed_at_epoch: int | None = None
    """The epochs its run had reported when it last resumed (restarted with its ``run_key``, or
    from a checkpoint); ``None``: it never resumed."""

    @property
    def reported(self) -> bool:
        """Whether the run reported at least one epoch (a final report or a progress report)."""
        return self.epochs is not None

    @property
    def restarted(self) -> bool:
        """Whether its run resumed since its last report: the epochs it reports next since that
        one hold the restart's one-off work (a compile, cold caches), as a first epoch does."""
        return self.resumed_at_epoch is not None and self.resumed_at_epoch == (self.epochs or 0)

    def since(self, cost: float, epoch: int) -> float | None:
        """The cost of an epoch over the epochs from its last report to one of cumulative
        ``cost`` at ``epoch``; None at its first report, and at its first since it `restarted`
        (those epochs hold one-off work)."""
        if not self.epochs or self.cost is None or epoch <= self.epochs or self.restarted:
            return None
        return (cost - self.cost) / (epoch - self.epochs)


@dataclass(frozen=True, slots=True)
class BestRun:
    """The early-stop reference: the cheapest converged run, or the cheapest batch size's mean."""

    batch_size: int
    cost: float


@dataclass(frozen=True, slots=True)
class ConvergedStats:
    """A batch size's converged runs: how many, their total cost and the cheapest."""

    count: int = 0
    total: float = 0.0
    best: float | None = None

    @property
    def mean(self) -> float | None:
        """Their mean cost (None without any)."""
        return self.total / self.count if self.count else None


@dataclass(frozen=True, slots=True)
class BatchSizeStats:
    """Running statistics of one batch size's final reports: their costs (count, mean, Welford
    M2) and the converged runs among them (count, cost sum, cheapest). The server stores them on
    the job row; the simulator keeps them in memory."""

    batch_size: int
    reports: int = 0
    mean_cost: float = 0.0
    m2_cost: float = 0.0
    converged_count: int = 0
    converged_cost_sum: float = 0.0
    best_converged_cost: float | None = None
    curves: tuple[Curve, ...] = ()
    """The learning curves of its latest converged runs (at most `CURVES_KEPT`), kept for a job
    with ``learning_curve_stop``."""
    paid_sum: float | None = None
    """What its runs cost (a run the learning-curve stop ended counts its cost so far, not its
    charged prediction). None: stored before this was kept (`paid`)."""

    @property
    def paid(self) -> float:
        """What its runs cost: `paid_sum`, or for statistics stored before it, their counted
        costs."""
        return self.reports * self.mean_cost if self.paid_sum is None else self.paid_sum

    @property
    def converged_epochs(self) -> float | None:
        """The mean epochs to converge of the converged runs it keeps the `curves` of (None:
        none kept)."""
        ends = [curve[-1][0] for curve in self.curves if curve]
        return sum(ends) / len(ends) if ends else None

    @property
    def costs(self) -> CostStats:
        """The cost statistics of every final report."""
        return CostStats(self.reports, self.mean_cost, self.m2_cost)

    @property
    def converged(self) -> ConvergedStats:
        """The converged runs' count, total cost and cheapest cost."""
        return ConvergedStats(
            self.converged_count, self.converged_cost_sum, self.best_converged_cost
        )

    def scaled(self, factor: float) -> BatchSizeStats:
        """The statistics of the same runs, each cost multiplied by ``factor``."""
        costs = self.costs.scaled(factor)
        best = self.best_converged_cost
        return replace(
            self,
            reports=costs.count,
            mean_cost=costs.mean,
            m2_cost=costs.m2,
            converged_count=self.converged_count,
            converged_cost_sum=self.converged_cost_sum * factor,
            best_converged_cost=None if best is None else best * factor,
            paid_sum=None if self.paid_sum is None else self.paid_sum * factor,
        )

    def add(
        self, cost: float, converged: bool, curve: Curve | None = None, paid: float | None = None
    ) -> BatchSizeStats:
        """These statistics with one more final report (and its run's ``curve``, to keep if it
        converged; ``paid``: what it cost, where ``cost`` is what it is charged)."""
        running = self.costs.add(cost)
        best = self.best_converged_cost
        if converged and (best is None or cost < best):
            best = cost
        curves = self.curves
        if converged and curve:
            curves = (*curves, curve)[-CURVES_KEPT:]
        return BatchSizeStats(
            self.batch_size,
            curves=curves,
            reports=running.count,
            mean_cost=running.mean,
            m2_cost=running.m2,
            converged_count=self.converged_count + int(converged),
            converged_cost_sum=self.converged_cost_sum + (cost if converged else 0.0),
            best_converged_cost=best,
            paid_sum=self.paid + (cost if paid is None else paid),
        )


@dataclass(frozen=True, slots=True)
class EpochSums:
    """A (profile, batch size)'s epochs: the energy and time of an epoch of each of its trials
    at their latest report, summed, and how many trials."""

    energy: float = 0.0
    time: float = 0.0
    trials: int = 0

    def changed(
        self, before: tuple[float, float] | None, after: tuple[float, float] | None
    ) -> EpochSums:
        """The sums with one trial's epoch ``before`` replaced by ``after`` (None: the trial
        had none, or has none any more)."""
        energy, time, trials = self.energy, self.time, self.trials
        if before is not None:
            energy, time, trials = energy - before[0], time - before[1], trials - 1
        if after is not None:
            energy, time, trials = energy + after[0], time + after[1], trials + 1
        return EpochSums(energy, time, trials)


@dataclass(frozen=True, slots=True)
class ByProfile:
    """What a job with two or more hardware profiles keeps per profile, so that no request
    reads all its trials: each (profile, batch size)'s epoch sums (see
    `zeus_bso.policy.profiles`) and each profile's bandit trials."""

    epochs: Mapping[tuple[str, int], EpochSums] = field(default_factory=dict)
    bandit_trials: Mapping[str, int] = field(default_factory=dict)

    def readings(self) -> dict[tuple[str, int], tuple[float, float]]:
        """The mean energy and time of an epoch by (profile, batch size)."""
        return {
            key: (sums.energy / sums.trials, sums.time / sums.trials)
            for key, sums in self.epochs.items()
            if sums.trials > 0
        }

    def with_epoch(
        self,
        before: tuple[str, int, float, float] | None,
        after: tuple[str, int, float, float] | None,
    ) -> ByProfile:
        """With one trial's epoch (profile, batch size, energy, time) ``before`` replaced by
        ``after``."""
        epochs = dict(self.epochs)
        if before is not None:
            key = (before[0], before[1])
            epochs[key] = epochs.get(key, EpochSums()).changed(before[2:], None)
        if after is not None:
            key = (after[0], after[1])
            epochs[key] = epochs.get(key, EpochSums()).changed(None, after[2:])
        return ByProfile({k: v for k, v in epochs.items() if v.trials > 0}, self.bandit_trials)

    def with_bandit_trial(self, profile: str, count: int = 1) -> ByProfile:
        """With ``count`` more bandit trials on ``profile`` (negative: fewer)."""
        trials = dict(self.bandit_trials)
        trials[profile] = trials.get(profile, 0) + count
        return ByProfile(self.epochs, {k: v for k, v in trials.items() if v > 0})


class PriorMode(StrEnum):
    """How far a new job trusts its parent's curve."""

    CHECK = "check"
    """The default runs first, and its epoch cost is held against the parent's."""
    TRUST = "trust"
    """The prior's best runs first (a declared parent: the same model and data pipeline)."""


@dataclass(frozen=True, slots=True)
class Prior:
    """A parent job's learned curve (in its cost units)."""

    costs: Mapping[int, float]
    """Each converging batch size's whole-run cost relative to the cheapest (1.0)."""
    hopeless: frozenset[int] = frozenset()
    """The batch sizes whose runs never converged."""
    epoch_costs: Mapping[int, float] = field(default_factory=dict)
    """The cost of one epoch at each batch size (the fingerprint)."""
    mode: PriorMode = PriorMode.CHECK
    epochs: Mapping[int, float] = field(default_factory=dict)
    """The mean epochs a converged run took at each batch size (the fingerprint too)."""
    parent: str | None = None
    """The id of the job it was learned by (None: given by hand, or simulated)."""

    def __post_init__(self) -> None:
        if not self.costs:
            raise ValueError("a prior needs the cost of at least one converging batch size")
        if any(not (math.isfinite(c) and c > 0) for c in self.costs.values()):
            raise ValueError("a prior's relative costs are positive and finite")

    @classmethod
    def of(
        cls,
        whole_run_costs: Mapping[int, float],
        hopeless: Iterable[int] = (),
        epoch_costs: Mapping[int, float] | None = None,
        mode: PriorMode = PriorMode.CHECK,
        *,
        epochs: Mapping[int, float] | None = None,
        parent: str | None = None,
    ) -> Prior:
        """A prior from a parent's whole-run costs (any units: normalised to the cheapest)."""
        if not whole_run_costs:
            raise ValueError("a prior needs the cost of at least one converging batch size")
        cheapest = min(whole_run_costs.values())
        relative = {size: cost / cheapest for size, cost in sorted(whole_run_costs.items())}
        epoch_costs, epochs = dict(epoch_costs or {}), dict(epochs or {})
        return cls(relative, frozenset(hopeless), epoch_costs, mode, epochs, parent)

    def best(self, fits: Iterable[int]) -> int | None:
        """The prior's cheapest batch size among ``fits`` (None: it knows none of them)."""
        known = [size for size in fits if size in self.costs]
        return min(known, key=lambda size: (self.costs[size], size), default=None)


@dataclass(frozen=True, slots=True)
class JobState:
    """What a job carries from trial to trial besides its trials: the next trial number, the
    bandit's arms once pruning is over, each batch size's statistics and the early-stop
    reference. The server stores it on the job row; the simulator keeps it in memory."""

    next_trial_number: int = 1
    arms: tuple[int, ...] | None = None
    bandit_start: int | None = None
    """The number of the first trial dispatched in the bandit stage."""
    stats: Mapping[int, BatchSizeStats] = field(default_factory=dict)
    """In the cost units of the job's first hardware profile (see `zeus_bso.policy.profiles`)."""
    best: BestRun | None = None
    profiles: Mapping[str, GpuConfig] = field(default_factory=dict)
    """The hardware profiles the job ran on, by `zeus_bso.spec.profile_key`, the first first.
    Empty while the job knows one profile: the one in its configuration."""
    by_profile: ByProfile | None = None
    """Kept once the job has two or more profiles (None before, and until a store has counted
    them: see `zeus_bso.policy.orchestration`)."""
    pinned: int | None = None
    """The batch size every run gets while the job is pinned (None: not pinned)."""
    memory_caps: Mapping[str, int] = field(default_factory=dict)
    """By hardware profile (`zeus_bso.spec.profile_key`): the smallest batch size that ran out
    of memory there. No run on that profile is dispatched at it or above (an ``infeasible``
    trial sets it); other profiles keep those sizes."""
    memory_doubts: Mapping[str, int] = field(default_factory=dict)
    """By hardware profile: the smallest batch size that ran out of memory while it trained
    there although runs of it, or of a larger size, had reported there (the model, its data or
    its precision may need more memory now; or a leak, another process). A run of it or a
    larger size there is told that its fit is not known, so it is tried first where the run can
    be, and one that runs out of memory again sets the memory cap; a run at it or above that
    trains to its end (its final report) clears the doubt
    (`zeus_bso.policy.machine.ran_out_where_it_fit`)."""
    prior: Prior | None = None
    """A related job's learned curve, which the job's pruning starts from while it holds
    (`zeus_bso.policy.priors`)."""

    def fits_known(self, profile: str, batch_size: int) -> bool:
        """Whether ``batch_size`` is known to fit on ``profile``: a run of it reported there
        (`measured`), and it is below the profile's memory doubt (`memory_doubts`)."""
        doubt = self.memory_doubts.get(profile)
        below = doubt is None or batch_size < doubt
        return below and self.measured(profile, batch_size)

    def measured(self, profile: str, batch_size: int) -> bool:
        """Whether a run of ``batch_size`` has reported on ``profile``: with two or more
        profiles, an epoch counted there (`ByProfile`); with one, a final report."""
        if len(self.profiles) >= 2 and self.by_profile is not None:
            return (profile, batch_size) in self.by_profile.epochs
        stats = self.stats.get(batch_size)
        return stats is not None and stats.reports > 0

    @property
    def stage(self) -> Stage:
        """The job's stage: pinned while it is, else pruning until the bandit has its arms."""
        if self.pinned is not None:
            return Stage.PINNED
        return Stage.PRUNING if self.arms is None else Stage.BANDIT

    @property
    def bandit_pulls(self) -> int:
        """Trials dispatched in the bandit stage so far."""
        return self.next_trial_number - self.bandit_start if self.bandit_start else 0


@dataclass(frozen=True, slots=True)
class JobHistory:
    """What the policy needs to know of a job's past.

    ``explorations`` matter only in the pruning stage; ``observations`` hold, per batch size, the
    costs of reported runs (the most recent ``window_size`` of them when the job has a window).
    """

    arms: tuple[int, ...] | None = None
    """The bandit's arms once pruning is over; ``None`` while pruning."""
    explorations: tuple[TrialState, ...] = ()
    """The pruning explorations (trials of kind ``exploration``)."""
    prior: Prior | None = None
    """While pruning: the related job's curve it starts from (`JobState.prior`)."""
    observations: Mapping[int, CostStats] = field(default_factory=dict)
    best: BestRun | None = None
    bandit_pulls: int = 0
    """Trials dispatched in the bandit stage so far."""
    probe: int | None = None
    """An arm the next run takes to measure how costs convert to its hardware profile
    (`zeus_bso.policy.profiles.probe_arm`); None: the bandit chooses."""
    extension: int | None = None
    """A batch size outside the arms the next run explores on its hardware profile
    (`zeus_bso.policy.profiles.extension`); None: the bandit chooses."""
    memory_cap: int | None = None
    """The next run's hardware profile's memory cap (`JobState.memory_caps`): nothing at or
    above it is dispatched. None: none known."""
    profile: str = ""
    """The next run's hardware profile (for an error's message)."""

    def fits(self, batch_size: int) -> bool:
        """Whether ``batch_size`` is below the memory cap."""
        return self.memory_cap is None or batch_size < self.memory_cap

    @property
    def stage(self) -> Stage:
        """The job's stage."""
        return Stage.PRUNING if self.arms is None else Stage.BANDIT


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The policy's answer to "which batch size should the next run use?"."""

    batch_size: int
    kind: TrialKind
    round: int | None = None
    """Pruning round of an exploration; ``None`` for other kinds."""
    arms: tuple[int, ...] | None = None
    """The bandit's arms after this decision (set once pruning is over)."""
    drawn: bool = False
    """A bandit run whose arm a random draw chose: decided again, it may get another."""
    probe: bool = False
    """A bandit run that probes an arm on a hardware profile new to the job."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The policy's answer to a report."""

    stop: bool
    converged: bool
    cost: float
    message: str
    """Upstream Zeus's message (its clients show it)."""
    charged: float | None = None
    """For a run the learning-curve stop ended: its predicted cost at convergence, which the job
    counts for it (what the run would have cost; its cost so far would make a batch size look
    cheap for being stopped early). None: the job counts ``cost``."""
    reason: StopReason | None = None
    """Why the run stops (None: it goes on)."""
    why: str | None = None
    """``reason`` in words, with rounded figures."""


@dataclass(frozen=True, slots=True)
class Posterior:
    """Normal posterior over an arm's mean reward (reward = -cost)."""

    mean: float
    precision: float

    @property
    def std(self) -> float:
        """Standard deviation (0 for infinite precision, infinite for zero precision)."""
        if self.precision == math.inf:
            return 0.0
        if self.precision <= 0.0:
            return math.inf
        return 1.0 / math.sqrt(self.precision)
