"""Short-lived jobs: a job that says how many times it will run (``expected_recurrences``)
explores only what can pay back within them.

Two rules, each over the whole horizon of ``N`` recurrences (`Horizon.may_explore`):

- **A budget.** Always running the default batch size would cost the job ``N * D`` (``D``: the
  default's measured cost, the mean of its converged runs). The job may spend at most
  `HORIZON_SLACK` more, as far as its explorations converge: with ``S`` spent so far, ``done``
  recurrences done (runs that converged) and ``B`` the cheapest batch size's mean cost, the
  recurrences left cost ``(N - done) * B`` if they all run at the cheapest, so an exploration
  may lose at most::

      allowance = (1 + HORIZON_SLACK) * N * D - S - (N - done) * B

  The next run explores only while a later recurrence is left to use what it finds and the
  allowance holds `EXPLORATION_RESERVE` of a run at ``B`` (what an exploration that does not
  pay typically loses before its cost bounds stop it), or, for a size the measured sizes say
  saves more than `CLEAR_SAVING` of a run over the runs left, anything at all.
- **A payback.** Where cost is convex in the log of the batch size (roughly so on the trace),
  the line through two measured sizes next to a candidate bounds its cost from below
  (`least_cost`), and once three sizes are measured, the parabola through the three nearest
  estimates it where it lies between them (`parabola_cost`). Beyond every measured size, where
  one run's epochs to converge can tilt that line, the line through an epoch's cost times the
  fewer epochs of the two nearest sizes estimates it too (`epoch_line_cost`), and the lower of
  the two counts; between measured sizes, where the whole costs reach past the sizes on each
  side, an epoch's cost and the epochs to converge read off those two estimate it instead
  (`between_by_parts`).
  A size is explored only if what it could save over the runs after its exploration,
  ``(N - done - 1) * (B - likely)`` with that estimate (`likely_cost`), passes
  `PAYBACK_MARGIN` of a run: once the costs flatten out, or turn up past the cheapest, the
  walk stops short of sizes that could save too little to pay back.

Where a rule says no to the first pruning round's next step, the next run explores instead an
untried neighbour of the cheapest batch size that the rules allow (one the round's stride
stepped over: `zeus_bso.policy.decide`); failing that, it takes the cheapest batch size so far
(`zeus_bso.policy.types.TrialKind.EXPLOIT`) and pruning waits. An exploration stops once
converging could no longer keep the job within the budget (`over_horizon`); one that never
converges is lost whole, up to the cheapest size's cost plus the allowance, so the job ends at
most one run at ``B`` past the budget, its runs' noise aside (the allowance is then spent, and
nothing more is explored; on the trace, P100 imagenet, whose only other size never converges,
ends 9.8% over its default at 10 recurrences). A saving found raises the allowance (``B``
falls), a loss lowers it. A job that ran its ``N`` runs is expected to run as many times again
as it ran (`Horizon.horizon`), and explores as far as that pays.

Without a converged run nothing is bounded yet (the first runs are the default's, or a prior's
best); before the default converged, what a related job's curve predicts of it stands in for
``D`` (a trusted parent's job need not run it), or without one the cheapest run. Measured on the
trace: `benchmarks/regret.py --horizons` (the algorithm page's "Short-lived jobs").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

from zeus_bso.policy.cost import Report, converged_means
from zeus_bso.policy.priors import predicted_cost
from zeus_bso.policy.types import BatchSizeStats, Prior, Verdict
from zeus_bso.spec import StopReason

HORIZON_SLACK = 0.03
"""How much more than always running the default a job with ``expected_recurrences`` may spend
over them, as a fraction."""

EXPLORATION_RESERVE = 0.2
"""The part of a run at the cheapest batch size the allowance must hold for the next run to
explore. On the trace an exploration that does not pay loses 0.2-0.3 of a run before its cost
bounds stop it, and more where a size never converges; with a 5% slack, which lets a job of 5
recurrences explore once, P100 imagenet (whose other size never converges) costs 19% more
than its default."""

PRIOR_SPREAD = 0.3
"""How far a related job's word on a size's cost may be off, as the standard deviation of the
log of the measured cost over the predicted one: where no two measured sizes estimate a size's
cost yet, the payback rule weighs the saving the prior predicts by this spread
(`expected_saving`). On the trace, a trusted parent with ``expected_recurrences``, P100 / V100,
against exploring every such size the budget allows: at 5 recurrences, sigma 0.1, 1.054 /
1.042 -> 1.028 / 1.032 (movielens-1m explored 8192, which the prior calls 46% dearer, beside
its best); at 10, sigma 0.1 1.041 / 1.043 -> 1.031 / 1.042 and sigma 0.2 1.051 / 1.055 ->
1.043 / 1.047; at 50, sigma 0.2, 1.016 / 1.024 -> 1.015 / 1.024. A spread of 0.2: 1.022 /
1.029 at 10 with sigma 0.1, but 1.022 / 1.028 at 50 with sigma 0.2 (the prior's noise hid a
cheaper neighbour that 50 runs would have paid back); 0.4: 1.039 / 1.043 at 10."""

PAYBACK_MARGIN = 0.1
"""The part of a run at the cheapest batch size that what a size could save over the runs
after its exploration (`likely_cost`) must pass for it to be explored. On the trace, at 10
recurrences on the V100: 1.112 (0.2 instead: 1.121; no payback rule: 1.151; measured before a
refused step let the job explore a neighbour of the cheapest instead, which gives 1.111, and
before the parabola's estimate, which gives 1.109: with it, 0.05 and 0.2 give 1.109 and 1.110)."""


CLEAR_SAVING = 0.3
"""The part of a run at the cheapest batch size that what a size could save over the runs
after its exploration, as the measured sizes estimate it (`likely_cost`), must pass for it to
be explored while the allowance holds less than `EXPLORATION_RESERVE` of a run (but
something). One unlucky exploration (a run an epoch late) can spend most of the budget's slack
before the walk's best step: on P100 squad, 12 converging at 5 epochs beside the default 24 at
4 left 0.1 of a run, and the job kept to 24 (1.19x the optimum) for good in 3 seeds of 20,
though an epoch's cost at 12 and 24 said 4 (the optimum) saves 9% of a run at each of the 7
runs left (0.64 of a run). On the trace, at 10 recurrences: the P100 1.1177 -> 1.1139 (squad
1.054 -> 1.032) and the V100 1.0997 -> 1.0982 (squad 1.043 -> 1.035); at 5 and 50 unchanged,
the V100 at 20 1.0553 -> 1.0556. 0.1 to 0.5 give the same at 10 (0.1: a trusted parent's job
at 5 recurrences, 1.031 -> 1.033 on the V100); 0.7: the P100 unchanged."""


@dataclass(frozen=True, slots=True)
class Horizon:
    """Where a job with ``expected_recurrences`` stands against its budget (in one profile's
    cost units: `of`)."""

    recurrences: int
    """``expected_recurrences``."""
    done: int
    """Runs that converged (a recurrence ends with one)."""
    spent: float
    """What every run that ended so far cost (`zeus_bso.policy.types.BatchSizeStats.paid`)."""
    default_cost: float | None
    """The default's mean converged cost (None: it has not converged)."""
    best_cost: float | None
    """The cheapest batch size's mean converged cost (None: nothing converged)."""
    means: Mapping[int, float] = field(default_factory=dict)
    """Each batch size's mean converged cost."""
    epochs: Mapping[int, float] = field(default_factory=dict)
    """Each batch size's mean epochs to converge, over the converged runs it keeps the learning
    curves of (`zeus_bso.policy.types.BatchSizeStats.curves`)."""

    @classmethod
    def of(
        cls,
        recurrences: int,
        stats: Mapping[int, BatchSizeStats],
        default_batch_size: int,
        prior: Prior | None = None,
    ) -> Horizon:
        """The horizon of a job expecting ``recurrences`` runs, from its batch sizes' ``stats``.
        The default's cost is its measured mean, or, where it has not converged, what a related
        job's curve (``prior``) predicts of it (`zeus_bso.policy.priors.predicted_cost`): a
        trusted parent's job runs the parent's best first, and it may spend what running the
        default would have, not only what its cheapest size costs. (Against its cheapest, a
        trusted parent whose optimum is a size off stayed there: after the best and its dearer
        neighbour the allowance was spent, and the other neighbour, the true optimum, never ran:
        P100 cifar100 1.119 at 10 recurrences, 1.060 with the default predicted.)"""
        means = converged_means(stats)
        default = means.get(default_batch_size)
        if default is None and prior is not None:
            default = predicted_cost(prior, means, default_batch_size)
        epochs = {
            size: mean_epochs
            for size, entry in stats.items()
            if size in means and (mean_epochs := entry.converged_epochs) is not None
        }
        return cls(
            recurrences,
            sum(entry.converged_count for entry in stats.values()),
            sum(entry.paid for entry in stats.values()),
            default,
            min(means.values(), default=None),
            means,
            epochs,
        )

    @property
    def horizon(self) -> int:
        """The recurrences the job is expected to run in all: ``expected_recurrences``, and
        once it ran that many, twice as many as it ran (a job that outlived what it expected
        is expected to run as many times again)."""
        return self.recurrences if self.done < self.recurrences else 2 * self.done

    @property
    def left(self) -> int:
        """The recurrences left, this one included."""
        return self.horizon - self.done

    @property
    def budget(self) -> float | None:
        """What the job may spend over its `horizon`: `HORIZON_SLACK` more than running the
        default that many times (None: nothing converged, nothing bounded)."""
        if self.best_cost is None:
            return None
        reference = self.best_cost if self.default_cost is None else self.default_cost
        return (1.0 + HORIZON_SLACK) * self.horizon * reference

    @property
    def allowance(self) -> float | None:
        """What one more exploration may lose (None: nothing converged, nothing bounded)."""
        budget, best = self.budget, self.best_cost
        if budget is None or best is None:
            return None
        return budget - self.spent - self.left * best

    def may_explore(self, batch_size: int, predicted: float | None = None) -> bool:
        """Whether the next run may explore ``batch_size``: a later recurrence is left to use
        what it finds, the budget has something left to lose, and what the size could save
        at most over the runs left (`least_cost`) is worth that much; where that saving is
        clear (`CLEAR_SAVING`), the budget need only hold something. Where a related job's
        curve ``predicted`` its cost (`zeus_bso.policy.priors`) and the saving it predicts is
        worth that much, the budget need only hold something. (Letting the prior's word alone
        decide within the expected runs gave a declared parent 1.025 instead of 1.050 at 10
        recurrences on the V100, but kept a job whose parent's optimum was one size off from
        the true one through 50: 1.094 and 1.128 at 50, against 1.018 and 1.024.) Where the
        prior predicted its cost and no two measured sizes estimate it, the saving the prior
        predicts is weighed by how far the prior may be off (`expected_saving` at
        `PRIOR_SPREAD`): a saving the prior makes unlikely is worth a run over a long horizon
        only."""
        allowance, best = self.allowance, self.best_cost
        if allowance is None or best is None:
            return True
        if self.left < 2:
            return False
        pays = (
            predicted is not None and (self.left - 1) * (best - predicted) > PAYBACK_MARGIN * best
        )
        if pays and allowance > 0.0:
            return True
        likely = likely_cost(self.means, batch_size, self.epochs)
        if likely is not None and (self.left - 1) * (best - likely) > CLEAR_SAVING * best:
            return allowance > 0.0
        if allowance <= EXPLORATION_RESERVE * best:
            return False
        if likely is None and predicted is not None:  # the prior's word, weighed
            saving = expected_saving(predicted / best, PRIOR_SPREAD)
            return (self.left - 1) * saving > PAYBACK_MARGIN
        return likely is None or (self.left - 1) * (best - likely) > PAYBACK_MARGIN * best


def expected_saving(ratio: float, spread: float) -> float:
    """What a run of a size predicted to cost ``ratio`` times the cheapest is expected to save
    over it, as a part of the cheapest's cost, where its cost is the prediction times a
    lognormal error of ``spread`` (the log's standard deviation): ``E[max(0, 1 - ratio *
    exp(spread * Z))]`` for a standard normal ``Z`` (a put's value at strike 1). A size
    predicted 10% dearer, at a spread of 0.3: 0.065 of a run; 46% dearer: 0.013."""
    if spread <= 0.0:
        return max(0.0, 1.0 - ratio)
    normal = NormalDist()
    cheaper = -math.log(ratio) / spread  # how many spreads below the cheapest's cost
    return normal.cdf(cheaper) - ratio * math.exp(spread * spread / 2) * normal.cdf(
        cheaper - spread
    )


def least_cost(means: Mapping[int, float], batch_size: int) -> float | None:
    """The least ``batch_size`` can cost where cost is convex in the log of the batch size:
    the line through the two measured sizes (``means``: mean converged cost by size) next to
    it on one side, extended to it, bounds it from below; the higher of the two sides' bounds.
    None: no side has two measured sizes."""
    x = math.log(batch_size)
    below = sorted(size for size in means if size < batch_size)[-2:]
    above = sorted(size for size in means if size > batch_size)[:2]
    bounds = []
    for pair in (below, above):
        if len(pair) == 2:
            (x0, y0), (x1, y1) = ((math.log(s), means[s]) for s in pair)
            bounds.append(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return max(bounds, default=None)


def parabola_cost(means: Mapping[int, float], batch_size: int) -> float | None:
    """What ``batch_size`` likely costs where cost is convex in the log of the batch size: the
    parabola through the three measured sizes (``means``: mean converged cost by size) nearest
    to it in that log, at it. None: fewer than three measured sizes, a size outside the span of
    the three (its vertex is a guess there), or a parabola that does not open upwards (their
    noise, not their shape: nothing is estimated).

    Past the cheapest size the line bound (`least_cost`) goes on falling with the walk's
    slope, so a size beyond it looks as if it could save as much again; the parabola turns
    up there as the measured costs do. On the trace, at 10 recurrences: 1.111 -> 1.109 on the
    V100 and 1.129 -> 1.124 on the P100 (on the V100 cifar100 explores 512 after 128 in no
    seed of 20 instead of 9, its converged explorations cost 0.8 points instead of 2.0, and
    movielens-1m explores 8192 after 16384 in 2 seeds of 20 instead of 8; librispeech's walk
    stops at 72 more often, 1.131 -> 1.138); at 20, 1.070 -> 1.067 and 1.068 -> 1.065; at 50,
    1.040 -> 1.041 and 1.031 -> 1.030 (`benchmarks/regret.py --horizons`). A least-squares
    parabola through every measured size instead: the same but for V100 librispeech (1.148 at
    10), whose far sizes bend it. Beyond the three it is not used: on V100 librispeech (costs
    flat from 48 to 96) the parabola through 72, 128 and 192 put its vertex at 72 in 7 seeds of
    20 and kept the walk from 48 and 56; the line bound alone there: 1.138 -> 1.131 at 10, the
    rest unchanged."""
    if len(means) < 3:
        return None
    x = math.log(batch_size)
    nearest = sorted(sorted(means), key=lambda size: abs(math.log(size) - x))[:3]
    (x0, y0), (x1, y1), (x2, y2) = ((math.log(size), means[size]) for size in nearest)
    if not min(x0, x1, x2) < x < max(x0, x1, x2):
        return None
    w0 = y0 / ((x0 - x1) * (x0 - x2))
    w1 = y1 / ((x1 - x0) * (x1 - x2))
    w2 = y2 / ((x2 - x0) * (x2 - x1))
    if w0 + w1 + w2 <= 0.0:  # the x**2 coefficient: it opens downwards, or is a line
        return None
    return w0 * (x - x1) * (x - x2) + w1 * (x - x0) * (x - x2) + w2 * (x - x0) * (x - x1)


def epoch_line_cost(
    means: Mapping[int, float], epochs: Mapping[int, float], batch_size: int
) -> float | None:
    """What ``batch_size`` likely costs by its parts, an epoch's cost (``means`` over
    ``epochs``: mean epochs to converge) times the epochs to converge. Beyond every measured
    size: the line through an epoch's cost at the two measured sizes nearest to it, in the log
    of the batch size, extended to it, times the fewer epochs of the two (as optimistic as the
    line bound: it may converge as soon as the faster of them). Between measured sizes
    (`between_by_parts`): both parts read off the measured sizes on each side. None: fewer than
    two measured sizes with their epochs on its side, or none on one side of it.

    An epoch's cost is measured whole by every run and changes smoothly with the size; the
    epochs to converge are whole numbers that vary from run to run, and one epoch more at one
    of two sizes tilts the line through their whole costs (`least_cost`) the other way. On V100
    librispeech (costs within 9% from 48 to 96, each run 7-10 epochs) the default 192 at 9
    epochs and 128 at 10 made that line say smaller sizes cost more, and the walk kept to 156
    (27% above 48) in 4 seeds of 20; at 50 recurrences the same kept the job at 1.100 against
    1.054 without ``expected_recurrences``. The fewer epochs of the two rather than the
    nearest's: P100 squad's 12 converging at 5 epochs and the default 24 at 4 made the nearest's
    say 4 and 8 cost more too; at 10, 20 and 50 recurrences 1.1235 -> 1.1229, 1.0652 -> 1.0622
    and 1.0294 -> 1.0259 on the P100, 1.1015 -> 1.1003, 1.0595 -> 1.0585 and 1.0317 -> 1.0311 on
    the V100."""
    per_epoch = {size: means[size] / epochs[size] for size in means if epochs.get(size)}
    if _between(means, batch_size):
        return between_by_parts(per_epoch, epochs, batch_size)
    line = least_cost(per_epoch, batch_size)
    if line is None:
        return None
    x = math.log(batch_size)
    nearest = sorted(per_epoch, key=lambda size: abs(math.log(size) - x))[:2]
    return line * min(epochs[size] for size in nearest)


def between_by_parts(
    per_epoch: Mapping[int, float], epochs: Mapping[int, float], batch_size: int
) -> float | None:
    """What ``batch_size``, between measured sizes, likely costs by its parts (`epoch_line_cost`):
    an epoch's cost (``per_epoch``, by measured size) on the line, in the log of the batch size,
    between the measured sizes next to it on each side, times the epochs to converge on the
    line between theirs (``epochs``), less one (the whole epoch a run's count is rounded to),
    and no fewer than the fewer of the two. None: no measured size on one side.

    Between sizes whose runs converge within an epoch of each other, the line through their
    whole costs and the parabola (`least_cost`, `parabola_cost`) are tilted as beyond them: on
    V100 librispeech, 32 at 7 epochs and 56 at 8 (costs 1.05 and 1.07 of the oracle) made them
    put 48 (1.00) above 32, and at 10 recurrences the walk ended on 32 in 13 seeds of 20 (now
    6). With this estimate (as `likely_cost` takes it), at 10, 20 and 50 recurrences: the V100
    1.1003 -> 1.0997, 1.0585 -> 1.0553 and 1.0311 -> 1.0278 (librispeech 1.0959 -> 1.0953,
    1.0782 -> 1.0630 and 1.0536 -> 1.0353), the P100 1.1229 -> 1.1177, 1.0622 -> 1.0597 and
    1.0259 -> 1.0248; 5 recurrences as they were. The fewer epochs of the two alone (as beyond
    them): 1.1009 at 10 on the V100, cifar100 exploring 512 between 256 and 1024 (28 and 71
    epochs; 512 took 40-49) in 10 seeds of 20; the epochs on the line, not one fewer: V100
    librispeech 1.0776 at 20."""
    below = max((size for size in per_epoch if size < batch_size), default=None)
    above = min((size for size in per_epoch if size > batch_size), default=None)
    if below is None or above is None:
        return None
    share = (math.log(batch_size) - math.log(below)) / (math.log(above) - math.log(below))
    epoch_cost = per_epoch[below] + (per_epoch[above] - per_epoch[below]) * share
    low, high = epochs[below], epochs[above]
    return epoch_cost * max(min(low, high), low + (high - low) * share - 1.0)


def likely_cost(
    means: Mapping[int, float], batch_size: int, epochs: Mapping[int, float] | None = None
) -> float | None:
    """What the payback rule takes ``batch_size`` to cost: the higher of the line bound
    (`least_cost`) and the parabola's estimate (`parabola_cost`); where one of the measured
    runs' epochs can tilt them, the estimate by an epoch's cost (`epoch_line_cost`, with
    ``epochs``: each size's mean epochs to converge) too: beyond the measured sizes the lower of
    the two, between them that estimate alone (`between_by_parts`). None: the whole costs give
    none (too few measured sizes: the walk's first steps are pruning's).

    Between two measured sizes both parts are measured on each side, while the whole costs'
    line and parabola reach past them to a third size; the lower of the two instead: 1.1001
    (V100) and 1.1229 (P100) at 10 recurrences, against 1.0997 and 1.1177 (on the P100,
    movielens-1m no longer explores 8192 between 4096 and 16384 in 4 seeds of 20, nor squad 8
    between 4 and 12 in 7).
    The estimate by parts where the whole costs give none (one measured size on each side):
    1.1037 and 1.1221 at 10, sentiment140 kept to its default."""
    known = [
        c
        for c in (least_cost(means, batch_size), parabola_cost(means, batch_size))
        if c is not None
    ]
    likely = max(known, default=None)
    by_parts = None if epochs is None else epoch_line_cost(means, epochs, batch_size)
    if likely is None or by_parts is None:
        return likely
    return by_parts if _between(means, batch_size) else min(likely, by_parts)


def _between(means: Mapping[int, float], batch_size: int) -> bool:
    """Whether ``batch_size`` lies between measured sizes (``means``' keys): the estimates by
    parts read it off the sizes on each side (`between_by_parts`), not off a line extended."""
    return bool(means) and min(means) < batch_size < max(means)


def over_horizon(horizon: Horizon, report: Report) -> Verdict | None:
    """The stop of an exploration that could no longer converge within the job's budget, or
    None: it stops before an epoch that would take its cost past the cheapest batch size's mean
    plus the `Horizon.allowance` (were it to converge there, the job would spend more than the
    budget; were it to go on, more still). Without a converged run, nothing."""
    allowance, best = horizon.allowance, horizon.best_cost
    if allowance is None or best is None:
        return None
    limit = best + max(allowance, 0.0)
    next_epoch = report.next_epoch_cost
    if report.cost + next_epoch <= limit:
        return None
    return Verdict(
        stop=True,
        converged=False,
        cost=report.cost,
        message=(
            f"Batch Size({report.batch_size}) exceeded the job's exploration budget: cost"
            f"({report.cost}) + next epoch({next_epoch}) > min_cost({best}) + allowance"
            f"({max(allowance, 0.0)})"
        ),
        reason=StopReason.COST_BOUND,
        why=(
            f"converging would take the job over what its expected_recurrences"
            f" ({horizon.recurrences}) allow: its cost after one more epoch would be"
            f" {(report.cost + next_epoch) / best:.1f}x the cheapest run's, and the job may"
            f" still lose {max(allowance, 0.0) / best:.2f}x of one to exploring"
        ),
    )
