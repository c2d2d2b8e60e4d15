"""Parents for a simulated job: the prior a related job's learned curve gives it
(`zeus_bso.policy.Prior`), made from a trace.

A parent is a workload of the trace, the same as the job's or another. Its curve is what a job
of it learns: each batch size's expected whole-run cost (`TraceJob.expected_cost`), the sizes
that never converge, the cost of an epoch and the epochs a converged run takes, with three
departures from the job's own curve that a real parent has:

- ``sigma``: each cost and epoch cost drawn from a lognormal of that spread around the truth
  (another data set of the same model, a changed target);
- ``shift``: the whole-run costs moved by that many sizes (the optimum with them): what the
  parent learned at the k-th size is said of the (k - shift)-th; sizes it says nothing of are
  unknown to the prior, not hopeless;
- another workload (the wrong prior): its curve laid over the job's sizes by their rank.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from zeus_bso.policy.types import Prior, PriorMode
from zeus_bso.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class ParentCurve:
    """What a parent learned of a job's batch sizes, in the trace's cost units (before
    `Prior.of` normalises the whole-run costs to the cheapest)."""

    costs: dict[int, float]
    """Each converging size's whole-run cost."""
    hopeless: set[int]
    """The sizes the parent never saw converge."""
    epoch_costs: dict[int, float]
    """The cost of one epoch at each size."""
    epochs: dict[int, float]
    """The epochs a converged run takes at each converging size."""

    def prior(self, mode: PriorMode) -> Prior | None:
        """The prior (None: no size converges)."""
        if not self.costs:
            return None
        return Prior.of(self.costs, self.hopeless, self.epoch_costs, mode, epochs=self.epochs)

    def runs(self) -> list[ParentRun]:
        """One run of a real parent job at each size it says something of: a converging size's
        run converges in its epochs (rounded: a real run's are whole) at its whole-run cost, a
        hopeless size's never converges. (A real parent's epoch cost is its run's cost over its
        epochs, so it departs from `epoch_costs` by their noise; a size it knows only the epoch
        cost of has no run: a real parent that ran a size knows whether it converged.)"""
        runs = []
        for size, cost in self.costs.items():
            epochs = max(1, round(self.epochs[size]))
            runs.append(ParentRun(size, epochs, cost / epochs))
        hopeless = (ParentRun(size, None, self.epoch_costs[size]) for size in self.hopeless)
        return runs + sorted(hopeless, key=lambda run: run.batch_size)

    def learned(self, mode: PriorMode) -> Prior | None:
        """The prior a server learns from a parent job that ran `runs`, as
        `zeus_bso.policy.learned_prior` learns it (None: none converges)."""
        runs = self.runs()
        took = {run.batch_size: (run.epochs, run.epoch_cost) for run in runs if run.epochs}
        if not took:
            return None
        return Prior.of(
            {size: epochs * cost for size, (epochs, cost) in took.items()},
            self.hopeless,
            {run.batch_size: run.epoch_cost for run in runs},
            mode,
            epochs={size: float(epochs) for size, (epochs, _) in took.items()},
        )


@dataclass(frozen=True, slots=True)
class ParentRun:
    """A run a parent job reports for a prior to be learned from it (`ParentCurve.runs`): each
    epoch costs ``epoch_cost``."""

    batch_size: int
    epochs: int | None
    """The epochs it converges in (None: it never converges, and runs to ``max_epochs``)."""
    epoch_cost: float


def parent_curve(
    job: TraceJob,
    parent: TraceJob,
    *,
    eta_knob: float,
    seed: int = 0,
    sigma: float = 0.0,
    shift: int = 0,
    epochs_scale: float = 1.0,
) -> ParentCurve:
    """What ``parent`` learned of ``job``'s batch sizes; its prior is `ParentCurve.prior`. Its
    noise depends on ``seed`` alone (drawn apart from the simulation's). With
    ``epochs_scale``, the parent's runs converged in that many times the epochs, at that many
    times the cost (below 1: the job's target lies farther than its parent's); its sizes' costs
    relative to each other stay the trace's."""
    if sigma < 0:
        raise ValueError(f"sigma is a lognormal spread, 0 or more: {sigma}")
    if not epochs_scale > 0:
        raise ValueError(f"epochs_scale is a factor, above 0: {epochs_scale}")
    noise = random.Random(f"parent-{seed}")
    theirs, mine = parent.batch_sizes, job.batch_sizes

    def rank(index: int) -> int:
        """The parent's size at the job's ``index``: the same size, or the same rank."""
        if parent.workload.name == job.workload.name or len(mine) == 1:
            return index
        return round(index * (len(theirs) - 1) / (len(mine) - 1))

    costs: dict[int, float] = {}
    hopeless: set[int] = set()
    epoch_costs: dict[int, float] = {}
    epochs: dict[int, float] = {}
    for index, size in enumerate(mine):
        at = rank(index)
        epoch_costs[size] = parent.epoch_cost(theirs[at], eta_knob) * _drawn(noise, sigma)
        said = at + shift
        if not 0 <= said < len(theirs):
            continue
        cost = parent.expected_cost(theirs[said], eta_knob)
        if math.isinf(cost):
            hopeless.add(size)
            continue
        costs[size] = cost * _drawn(noise, sigma) * epochs_scale
        epochs[size] = cost / parent.epoch_cost(theirs[said], eta_knob) * epochs_scale
    return ParentCurve(costs, hopeless, epoch_costs, epochs)


def _drawn(noise: random.Random, sigma: float) -> float:
    return math.exp(noise.gauss(0.0, sigma)) if sigma else 1.0
