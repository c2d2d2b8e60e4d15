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

from zeus_bso.policy.types import Prior, PriorMode
from zeus_bso.sim.trace import TraceJob


def parent_prior(
    job: TraceJob,
    parent: TraceJob,
    *,
    eta_knob: float,
    seed: int = 0,
    sigma: float = 0.0,
    shift: int = 0,
    mode: PriorMode = PriorMode.CHECK,
) -> Prior | None:
    """The prior ``parent``'s curve gives ``job`` (None: it knows no size of the job that
    converges). Its noise depends on ``seed`` alone (drawn apart from the simulation's)."""
    if sigma < 0:
        raise ValueError(f"sigma is a lognormal spread, 0 or more: {sigma}")
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
        costs[size] = cost * _drawn(noise, sigma)
        epochs[size] = cost / parent.epoch_cost(theirs[said], eta_knob)
    if not costs:
        return None
    return Prior.of(costs, hopeless, epoch_costs, mode, epochs=epochs)


def _drawn(noise: random.Random, sigma: float) -> float:
    return math.exp(noise.gauss(0.0, sigma)) if sigma else 1.0
