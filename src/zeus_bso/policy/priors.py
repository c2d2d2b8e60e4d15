"""Priors from a related job: what a parent job learned of its batch sizes, and the walk that
starts a new job from it instead of from the default.

A `Prior` is a parent's learned curve: each batch size's whole-run cost relative to its
cheapest, the sizes that never converged, and the cost of an epoch at each size (the
fingerprint, which says whether the two jobs train alike). The prior's walk replaces the
pruning rounds while the prior holds:

- *check* (`PriorMode.CHECK`): the default runs first, as a cold job's; then the prior's best;
- *trust* (`PriorMode.TRUST`): the prior's best runs first, where the prior knows the cost of
  two sizes or more (`trusted_first`); else the default, as in check mode;

then the untried neighbours of the cheapest so far, one at a time (the one the prior finds
cheaper first; one it does not know ranks with its best: `cheaper_first`), until the
cheapest and the prior's best have none (the best's, while the cheapest lies within a size of
it, where the prior lets them cost less than the cheapest: `may_undercut`): the sizes that
converged are the bandit's arms.
The prior is dropped, and the job goes on as a cold one (`zeus_bso.policy.pruning`) over the
same runs (but those it stopped on the parent's word alone: `cold_explorations`), as soon as
the measurements disagree with it: the first run's epoch cost is more than `FINGERPRINT_RATIO`
from the parent's (either way), the prior's best does not converge, the measured ratio of two
sizes' costs is more than `COST_RATIO_TOLERANCE` from the prior's, a size it called hopeless
converges, or the cheapest lands more than one size from the prior's best (two in trust mode:
`CHEAPEST_REACH`).

The walk's explorations carry round `PRIOR_ROUND`, so that what the walk decided depends on its
own runs alone (once dropped, a prior stays dropped); the cold walk reads them as its first
round's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from zeus_bso.policy.cost import converged_means
from zeus_bso.policy.profiles import may_beat
from zeus_bso.policy.pruning import (
    PRIOR_ROUND,
    ExplorationInFlight,
    ExploreNext,
    Outcome,
    PruningDone,
    PruningSettings,
    PruningStep,
    neighbours,
    outcome_of,
)
from zeus_bso.policy.types import BatchSizeStats, JobHistory, Prior, PriorMode, TrialState, Verdict
from zeus_bso.spec import StopReason, TrialStatus

FINGERPRINT_RATIO = 2.0
"""Most a first run's epoch cost may differ from the parent's at that size (either way)."""

FIRST_EPOCH_RATIO = 4.0
"""Most a run's first epoch may cost, as a multiple of the parent's cost of an epoch at its size,
for the run's first report to leave it going on the prior's word; from its second report on, its
epochs since the report before are held to `FINGERPRINT_RATIO`, but at its first report since it
resumed (the restart compiles again), its mean epoch to this ratio, as at its first. A first
epoch may hold one-off work (a compile, cold caches, a dataset's first read), which the parent's
cost of an epoch spreads over all of its runs' epochs: held to 2x, a compile longer than one
epoch and a quarter stopped the run of a job whose parent's runs took ten epochs, on a word that
held, and the job went on cold (at 4x, one longer than five epochs). An epoch that costs more
than 4x the parent's is no compile: on the trace, movielens-1m trusted from cifar100's curve
(5.4x there) cost 1.720 at 10 recurrences on the V100 stopped after its first epoch, 2.104 after
its second."""

EPOCHS_RATIO_DEARER = 1.25
"""Most epochs a run of the prior's walk whose cost the prior cannot scale (it knows no other
size's cost: a parent that converged at this size alone) may take, as a multiple of the epochs
its parent's runs at that size took to converge, once it costs more than the mean of another
size that converged here: it can no longer be the cheapest, and it is late against its
parent's word. On the trace, a parent whose optimum is a size off knows P100 imagenet's 64
alone, which never converges there, and its run after the default's went on to 1.6-1.75
times the default's cost in 7 seeds of its 10: that parent 1.0645 -> 1.0625 at 10
recurrences on the P100 (1.5: 1.0640), every other scenario unchanged
(`benchmarks/regret_priors.py`).

A run that nothing measured here bounds (a trusted prior's first run, before any size is
measured, or one that still costs less than every size that converged) has no bound on the
parent's epochs (only on its cost: `PARENT_RUN_RATIO`): it trains to the target, ``max_epochs``
or that bound, as a cold job's first run at the default trains to the target or
``max_epochs``. The parent's epochs are no measure of the job's where its target lies farther
(more epochs at every size, at the same costs relative to each other): a bound of 2.5x them
stopped the trusted first run at the cheapest size, read as a size that never converges (on
the trace, a parent whose runs took a third of the epochs: 1.221 at 10 recurrences on the
V100, 1.630 with ``expected_recurrences``; without the bound 1.165 and 1.105, every other
scenario unchanged to the byte)."""

PARENT_RUN_RATIO = 6.0
"""Most a run of the prior's walk that no size measured here scales the prior's word for (a
trusted prior's first run; a parent that knows its size's cost alone) may cost, as a multiple
of what the parent's runs at its size cost (their cost of an epoch times their epochs to
converge): it stops before the epoch that would take it past that. Without it such a run
trained to ``max_epochs`` wherever the parent's word was wrong and its size never converges
here: on the trace, in trust mode, movielens-1m seeded from squad's curve runs its smallest
size first, and on the P100 (where the two jobs' epochs there cost within 2x of each other, so
the fingerprint holds) that run alone cost about 1,360 runs at the optimum (regret at 10
recurrences); 180 with the bound. A job whose target lies farther than its parent's takes
more epochs at every size: at 4x, a parent whose runs took a third of this job's epochs had
its trusted first run stopped, and with ``expected_recurrences`` that spent the budget (1.105
-> 1.167 at 10 recurrences on the V100, 1.126 -> 1.211 on the P100); at 6x every scenario of
`benchmarks/regret_priors.py` is unchanged to the byte. A run it stops says nothing of its
size: the cold walk explores the size again (`cold_explorations`)."""

TRUSTED_PULLS = 3
"""How many bandit trials a trusted prior that held through its walk stands for: the job's
bandit exploits (``bandit_exploit_after``) that many trials sooner (after 2 at the default
5). A declared parent trains the same model on the same pipeline, and the job's own runs agreed
with it: sampling arms as long as a cold job does spent runs on sizes a noisy run made look
cheap. On the trace, with `EPOCHS_RATIO_DEARER`, at 10 recurrences: V100 1.047 -> 1.043
(sigma 0.1), 1.056 -> 1.052 (sigma 0.2), 1.051 -> 1.050 (optimum shifted); P100 1.046 ->
1.042, 1.054 -> 1.051, 1.0625 -> 1.0593; at 50 the same or lower but P100 sigma 0.2, 1.015 ->
1.019 (2 and 4 trials: 1.0593 and 1.0615 shifted on the P100 at 10). Checked priors keep the
bandit's pace (with it, V100 at 50 1.029 -> 1.032): the default's run alone checked them."""

COST_RATIO_TOLERANCE = 1.5
"""Most a measured ratio of two sizes' whole-run costs may differ from the prior's (either
way)."""


CHEAPEST_REACH = {PriorMode.CHECK: 1, PriorMode.TRUST: 2}
"""How many sizes from the prior's best the cheapest may land, by mode, for the prior to hold.
A declared parent's optimum may sit a size away, and one noisy run may put the cheapest a size
further: dropped there, the cold walk runs the default and the sizes past it that the walk had
no reason to try (on the trace, a parent whose optimum is a size off: 1.072 at 10 recurrences
on the V100 with a reach of one, 1.063 with two; 1.106 and 1.095 on the P100)."""


def _off(measured: float, expected: float, tolerance: float) -> bool:
    """Whether two positive figures differ by more than ``tolerance`` times, either way."""
    if not (measured > 0 and expected > 0):
        return False
    return max(measured / expected, expected / measured) > tolerance


@dataclass
class _Walk:
    settings: PruningSettings
    records: dict[int, list[TrialState]]
    converged: dict[int, float] = field(default_factory=dict)
    epoch_costs: dict[int, float] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    tried: set[int] = field(default_factory=set)

    def step(self, size: int) -> ExploreNext | ExplorationInFlight | bool:
        """The exploration ``size`` needs next, or whether it converged."""
        kept = [r for r in self.records.get(size, []) if r.status is not TrialStatus.INFEASIBLE]
        outcome, cost = outcome_of(kept, self.settings.max_unreported_failures)
        if outcome is Outcome.IN_FLIGHT:
            return ExplorationInFlight()
        if outcome is Outcome.UNTRIED:
            return ExploreNext(batch_size=size, round=PRIOR_ROUND)
        self.tried.add(size)
        reported = [r for r in kept if r.status is TrialStatus.REPORTED]
        if reported:
            first = min(reported, key=lambda r: r.trial_number)
            if first.epochs and first.cost:
                self.epoch_costs[size] = first.cost / first.epochs
            if first.epochs and first.converged:
                self.epochs[size] = first.epochs
        if outcome is Outcome.CONVERGED:
            self.converged[size] = math.inf if cost is None else cost
            return True
        return False

    def cheapest(self) -> int:
        return min(self.converged, key=lambda size: (self.converged[size], size))


def trusted_first(prior: Prior) -> bool:
    """Whether the prior's best runs first: in trust mode, where the prior knows the cost of
    two converging sizes or more. A parent that converged at one size alone says nothing of
    which size is cheaper, so its best is no better a first run than the job's default; the
    default runs first, and the prior's best next, as in check mode. (On the trace, a parent
    whose optimum is a size off from the job's knows one size of P100 imagenet, which has two:
    its best is the job's size that never converges, and its trusted first run cost 2.6 runs at
    the cheapest size; starting at the default, 1.085 -> 1.076 at 10 recurrences on the P100,
    every other scenario unchanged.)"""
    return prior.mode is PriorMode.TRUST and len(prior.costs) > 1


def cheaper_first(prior: Prior, best: int) -> Callable[[int], tuple[float, int]]:
    """The order of the walk's untried sizes: the one the prior finds cheaper first (the
    smaller of two it finds alike), and a size it does not know (the parent never ran it, or
    this job's list adds it) as if the prior put it at its ``best``'s cost, before the sizes it
    finds dearer.

    Ranked last instead, an unknown size came after every size the prior predicts dearer, and
    a job with ``expected_recurrences`` spent its budget on those first: on the trace, a parent
    whose optimum is a size below the true one knows no size above its best on movielens-1m
    (16384, the cheapest), and the job ran 4096, which the parent put 46% dearer than its
    best, stopped it at the budget, and kept to the parent's best for good. With
    ``expected_recurrences``, that parent 1.069 -> 1.041 (V100) and 1.102 -> 1.060 (P100) at
    10 recurrences, 1.038 -> 1.028 and 1.052 -> 1.031 at 20; without it 1.056 -> 1.055 and
    1.072 -> 1.074 at 10 (the same sizes in another order); the parents that know every size,
    and the wrong ones, unchanged (`benchmarks/regret_priors.py`)."""
    unknown = prior.costs[best]
    return lambda size: (prior.costs.get(size, unknown), size)


def may_undercut(
    prior: Prior, converged: Mapping[int, float], batch_size: int, cheapest: int
) -> bool:
    """Whether ``batch_size``, a neighbour of the prior's best that the walk tries only to guard
    the best against one costly run of its own, may cost less than the ``cheapest`` size so far
    (``converged``: the walk's whole-run costs by size) while the prior holds: what the prior
    predicts for it (`predicted_cost`), made as cheap as `COST_RATIO_TOLERANCE` lets a
    measured ratio stray before the prior is dropped, is below the cheapest's cost; or the
    prior predicts nothing for it.

    On the trace, a parent whose optimum is a size below the true one puts movielens-1m's 4096
    46% above its best, 8192, whose run measured dearer than 16384's: the walk still ran 4096,
    at 1.4-2.4 times 16384's cost (cifar100's alike). That parent at 10 recurrences 1.055 ->
    1.051 (V100) and 1.074 -> 1.065 (P100), at 5 1.079 -> 1.073 and 1.128 -> 1.109; with
    ``expected_recurrences``, whose budget had already refused most of those runs, 1.041 as it
    was (V100) and 1.060 -> 1.062 (P100); the parents within a spread and the checked ones
    within 0.1 points, the wrong ones unchanged (`benchmarks/regret_priors.py`)."""
    predicted = predicted_cost(prior, converged, batch_size)
    return predicted is None or predicted / COST_RATIO_TOLERANCE < converged[cheapest]


def next_prior_step(
    settings: PruningSettings, prior: Prior, explorations: Iterable[TrialState]
) -> PruningStep | None:
    """The prior's walk over its explorations (those of round `PRIOR_ROUND`): the exploration
    it needs next, or the arms once it is over; None once the prior is dropped (the job walks
    on as a cold one)."""
    records: dict[int, list[TrialState]] = {}
    for record in explorations:
        if record.round == PRIOR_ROUND:
            records.setdefault(record.batch_size, []).append(record)
    cap = settings.memory_cap
    sizes = [size for size in sorted(settings.batch_sizes) if cap is None or size < cap]
    best = prior.best(sizes)
    if best is None:
        return None
    walk = _Walk(settings, records)
    first = best if trusted_first(prior) else settings.default_batch_size
    if first not in sizes:
        first = best
    went = walk.step(first)
    if not isinstance(went, bool):
        return went
    measured, expected = walk.epoch_costs.get(first), prior.epoch_costs.get(first)
    if measured and expected and _off(measured, expected, FINGERPRINT_RATIO):
        return None  # the parent trains unlike this job
    took, expected = walk.epochs.get(first), prior.epochs.get(first)
    if took and expected and _off(took, expected, FINGERPRINT_RATIO):
        return None  # nor does it learn alike
    if not went and first not in prior.hopeless:
        return None
    if best != first:
        went = walk.step(best)
        if not isinstance(went, bool):
            return went
        if not went:
            return None  # the prior's best does not converge here
        if first in walk.converged and first in prior.costs:
            measured = walk.converged[best] / walk.converged[first]
            if _off(measured, prior.costs[best] / prior.costs[first], COST_RATIO_TOLERANCE):
                return None
    order = cheaper_first(prior, best)
    while True:
        # The cheapest's untried neighbours, then the prior's best's: one costly run at the
        # best must not turn the walk away from the sizes the prior puts cheapest. Once the
        # cheapest lies more than a size from the best, runs at two sizes or more moved it
        # there, and the best's far side is further still: the walk follows the cheapest.
        cheapest = walk.cheapest()
        candidates = [
            [s for s in neighbours(sizes, centre) if s not in walk.tried | prior.hopeless]
            for centre in (cheapest, best)
        ]
        untried = candidates[0]
        if not untried and abs(sizes.index(cheapest) - sizes.index(best)) <= 1:
            untried = [s for s in candidates[1] if may_undercut(prior, walk.converged, s, cheapest)]
        if not untried:
            break
        size = min(untried, key=order)
        went = walk.step(size)
        if not isinstance(went, bool):
            return went
    if any(size in prior.hopeless for size in walk.converged):
        return None
    if abs(sizes.index(walk.cheapest()) - sizes.index(best)) > CHEAPEST_REACH[prior.mode]:
        return None  # the cheapest lies away from where the prior put it
    return PruningDone(arms=tuple(sorted(walk.converged)))


def extension(
    prior: Prior,
    arms: Sequence[int],
    batch_sizes: Sequence[int],
    stats: Mapping[int, BatchSizeStats],
    history: JobHistory,
    tried: Iterable[int],
) -> int | None:
    """After a prior's walk, a batch size outside the arms to explore next, or None.

    The walk kept the arms around where the prior put the cheapest; the bandit's cheapest arm
    may turn out to lie at their edge, with a cheaper size beyond that no one tried (a cold
    walk would have). Its neighbours among the job's batch sizes are explored, one run each
    (the smaller first): one that is not an arm, not ``tried`` beyond the arms, not one the
    prior calls hopeless, and may cost less than the cheapest arm
    (`zeus_bso.policy.profiles.may_beat`). One that converges joins
    the arms, so the walk goes on from a new cheapest."""
    seen = history.observations
    measured = [arm for arm in arms if arm in seen and seen[arm].count]
    if not measured:
        return None
    best = min(measured, key=lambda arm: (seen[arm].mean, arm))
    done = set(tried)
    return next(
        (
            size
            for size in neighbours(sorted(batch_sizes), best)
            if size not in arms
            and size not in done
            and size not in prior.hopeless
            and history.fits(size)
            and may_beat(stats.get(size), seen.get(size), seen[best].mean)
        ),
        None,
    )


def over_prior(
    prior: Prior,
    stats: Mapping[int, BatchSizeStats],
    batch_size: int,
    cost: float,
    epoch: int,
    default_batch_size: int,
    since: float | None = None,
) -> Verdict | None:
    """The stop of a run the prior's walk started, where the prior's word was wrong, or None
    (``since``: the cost of an epoch over the epochs since the run's report before, None at its
    first, and at its first since it restarted: `zeus_bso.policy.types.TrialState.since`).

    Such a run is bounded by what the prior predicts of it, not only by the job's cost bounds:
    it stops once its cost of an epoch is more than `FINGERPRINT_RATIO` from the parent's at
    its size, either way (the two jobs do not train alike; an epoch cheaper than the parent's
    says so as much as a dearer one, and the parent's whole-run costs then say nothing of this
    job's: `_unlike_so_far`), or before the epoch that would take it past as many
    times the whole-run cost the prior predicts for it (scaled by the measured cost of the
    cheapest size both know; on the trace, 1.5 instead stopped runs of a related parent's best
    for 0.3 points of regret, and saved nothing against a wrong one). Where no measured size
    scales the prior's word (a trusted prior's first run, or a parent that knows this size's
    cost alone), it stops before the epoch that would take it past `PARENT_RUN_RATIO` times
    what the parent's runs at its size cost, and, once it costs more than another size that
    converged here, past `EPOCHS_RATIO_DEARER` times the epochs they took to converge. A
    stopped run did not converge: the walk drops the prior (and the cold walk explores again
    the size of one stopped on the parent's word alone: `cold_explorations`). The default's run
    of a checked prior is a cold job's run, which the prior does not bound.

    The fingerprint both ways: in trust mode with another workload's curve, V100 movielens-1m
    seeded from squad's ran its smallest size first (its epochs cost 0.38x the parent's there)
    and never converged: regret 324 at 10 recurrences, 4.6 once that run stops after its first
    epoch; over the 30 ordered pairs of workloads, 12.0 -> 1.31 on the V100 (cold: 1.15), the
    row "trust, another workload" of `benchmarks/regret_priors.py`; every other scenario
    unchanged to the byte."""
    if prior.mode is PriorMode.CHECK and batch_size == default_batch_size:
        return None
    if (why := _unlike_so_far(prior, batch_size, cost, epoch, since)) is not None:
        return _stopped(batch_size, cost, why)
    per_epoch = cost / epoch
    means = {size: mean for size, mean in converged_means(stats).items() if mean}
    predicted = predicted_cost(prior, means, batch_size)
    if predicted is None:
        if (why := _past_parent_run(prior, batch_size, cost, epoch)) is not None:
            return _stopped(batch_size, cost, why)
        took = prior.epochs.get(batch_size)
        cheaper = [size for size, mean in means.items() if size != batch_size and mean < cost]
        if not (took and cheaper and epoch + 1 > EPOCHS_RATIO_DEARER * took):
            return None
        why = (
            f"it ran {epoch} epochs below the target where its parent job converged in"
            f" {took:.3g} (the bound: {EPOCHS_RATIO_DEARER:g}x, since it costs more than batch"
            f" size {min(cheaper)} here)"
        )
        return _stopped(batch_size, cost, why)
    if cost + per_epoch <= FINGERPRINT_RATIO * predicted:
        return None
    why = (
        f"its cost is {cost / predicted:.1f}x what its parent job's curve predicts, "
        f"{(cost + per_epoch) / predicted:.1f}x after one more epoch (the bound: "
        f"{FINGERPRINT_RATIO:g})"
    )
    return _stopped(batch_size, cost, why)


def _unlike_so_far(
    prior: Prior, batch_size: int, cost: float, epoch: int, since: float | None
) -> str | None:
    """Why a run at ``batch_size`` that cost ``cost`` over its first ``epoch`` epochs trains
    unlike the parent (`_unlike`), as far as its reports tell yet: an epoch cheaper than the
    parent's from its first report; a dearer one from a later report, by the cheaper of its
    mean epoch and its epochs since the report before (``since``), and at the first report
    (``since`` None: also the first since a restart) only past `FIRST_EPOCH_RATIO`."""
    expected = prior.epoch_costs.get(batch_size)
    if not expected:
        return None
    measured = cost / epoch
    if FINGERPRINT_RATIO * measured >= expected:  # not cheaper: is it dearer yet?
        measured, most = (
            (measured, FIRST_EPOCH_RATIO)
            if since is None
            else (min(measured, since), FINGERPRINT_RATIO)
        )
        if measured <= most * expected:
            return None
    return _epoch_cost_words(measured, expected)


def _unlike(prior: Prior, batch_size: int, cost: float, epochs: int) -> str | None:
    """Why a run at ``batch_size`` that cost ``cost`` over ``epochs`` epochs trains unlike the
    parent: its cost of an epoch is more than `FINGERPRINT_RATIO` from the parent's at that
    size, either way (None: it is not)."""
    per_epoch, expected = cost / epochs, prior.epoch_costs.get(batch_size)
    if expected and _off(per_epoch, expected, FINGERPRINT_RATIO):
        return _epoch_cost_words(per_epoch, expected)
    return None


def _epoch_cost_words(measured: float, expected: float) -> str:
    return f"its cost of an epoch is {measured / expected:.2g}x its parent job's"


def _past_parent_run(prior: Prior, batch_size: int, cost: float, epochs: int) -> str | None:
    """Why a run at ``batch_size`` that cost ``cost`` over ``epochs`` epochs, which no size
    measured here scales the prior's word for, stops: one more epoch would take it past
    `PARENT_RUN_RATIO` times what the parent's runs at that size cost (None: it would not, or
    the parent did not converge there)."""
    took, per_epoch = prior.epochs.get(batch_size), prior.epoch_costs.get(batch_size)
    if not (took and per_epoch):
        return None
    whole, after = took * per_epoch, cost + cost / epochs
    if after <= PARENT_RUN_RATIO * whole:
        return None
    return (
        f"its cost is {cost / whole:.1f}x what its parent job's runs at that size cost,"
        f" {after / whole:.1f}x after one more epoch (the bound: {PARENT_RUN_RATIO:g}x)"
    )


def cold_explorations(
    prior: Prior,
    explorations: Iterable[TrialState],
    settings: PruningSettings,
    cheapest: float | None,
) -> tuple[TrialState, ...]:
    """The explorations the cold walk reads once ``prior`` is dropped: all but the runs that
    `over_prior` stopped on the parent's word alone (their cost of an epoch more than
    `FINGERPRINT_RATIO` from the parent's: other GPUs, another model; or their cost past
    `PARENT_RUN_RATIO` times the parent's runs at their size) before they cost as much as a run
    that converged here (``cheapest``: its cost; None: none did), or whose size the cold walk
    explored again. Such a run says that the parent trains unlike this job, nothing of whether
    its size converges here or costs less than the sizes that did: read as the size's outcome,
    it took the size off the cold walk for good (a trusted prior's best among them; and a
    default, with upstream's walk order, ended the job: "no batch size converged"). The cold
    walk explores its size again when it comes to it, and that run speaks for the size from
    then on: read first once a cheaper size converged, the stopped run had taken off the arms
    a size whose run again converged as the cheapest, and every bandit run, held to that
    size's cost, stopped short of the target."""
    explorations = tuple(explorations)
    again: dict[int, int] = {}  # by size: the latest trial number the cold walk explored it in
    for trial in explorations:
        if trial.round != PRIOR_ROUND and trial.status is not TrialStatus.INFEASIBLE:
            again[trial.batch_size] = max(trial.trial_number, again.get(trial.batch_size, 0))

    def unlike(trial: TrialState) -> bool:
        if trial.round != PRIOR_ROUND or trial.status is not TrialStatus.REPORTED:
            return False
        if trial.converged or not trial.epochs or trial.cost is None:
            return False
        if prior.mode is PriorMode.CHECK and trial.batch_size == settings.default_batch_size:
            return False  # a cold job's run, which the prior does not bound
        size, cost, epochs = trial.batch_size, trial.cost, trial.epochs
        if _unlike(prior, size, cost, epochs) is None and (
            _past_parent_run(prior, size, cost, epochs) is None
        ):
            return False
        if again.get(size, 0) > trial.trial_number:
            return True  # explored again: that run speaks for its size
        return cheapest is None or cost < cheapest  # else it cannot be the cheapest

    return tuple(trial for trial in explorations if not unlike(trial))


def epoch_scales(prior: Prior, batch_size: int) -> dict[int, float] | None:
    """How many times as many epochs a run of ``batch_size`` takes to converge as one of each
    other size the prior knows, as the parent's runs took them (None: the prior does not know
    ``batch_size``'s). The learning-curve stop scales other sizes' curves by it for a run of
    the prior's walk (`zeus_bso.policy.curves.epochs_left`) instead of by the run's pace over
    its first epochs: on the trace, trust mode at 10 recurrences on the V100 1.060 -> 1.056
    (sigma 0.2) and 1.061 -> 1.056 (optimum shifted), at 50 1.027 -> 1.022 (sigma 0.2), where
    the pace of a larger size's first epochs had ended runs of the cheapest size from a
    smaller one's curve."""
    mine = prior.epochs.get(batch_size)
    if not mine:
        return None
    return {size: mine / took for size, took in prior.epochs.items() if took and size != batch_size}


def predicted_cost(prior: Prior, means: Mapping[int, float], batch_size: int) -> float | None:
    """What the prior predicts a run of ``batch_size`` costs: its relative cost, scaled by the
    measured mean converged cost (``means``, by size) of the cheapest other size both know
    (None: no such size, or the prior does not know ``batch_size``)."""
    known = {
        size: mean for size, mean in means.items() if size != batch_size and size in prior.costs
    }
    if batch_size not in prior.costs or not known:
        return None
    reference = min(known, key=lambda size: (known[size], size))
    return known[reference] * prior.costs[batch_size] / prior.costs[reference]


def _stopped(batch_size: int, cost: float, why: str) -> Verdict:
    return Verdict(
        stop=True,
        converged=False,
        cost=cost,
        message=f"Batch Size({batch_size}) exceeded the cost its related job predicts: {why}",
        reason=StopReason.COST_BOUND,
        why=f"{why}; the job no longer follows that job's curve",
    )


def learned_prior(
    parent: str,
    stats: Mapping[int, BatchSizeStats],
    trials: Iterable[TrialState],
    mode: PriorMode,
    price: Callable[[float, float], float],
    profile: str | None = None,
) -> Prior | None:
    """The prior a job's history gives a new job (None: no batch size of it converged): each
    size's mean converged cost (``stats``, in the job's first profile's units), the sizes whose
    every final report ended unconverged, and from its reported ``trials`` on ``profile`` (its
    first; None: every trial's) the mean cost of an epoch (``price``: the cost of a run's
    energy and time, as the job prices them; not the cost a learning-curve stop charged) and
    the mean epochs to converge."""
    costs = converged_means(stats)
    if not costs:
        return None
    hopeless = [s for s, e in stats.items() if e.reports and not e.converged_count]
    per_epoch: dict[int, list[float]] = {}
    took: dict[int, list[int]] = {}
    for trial in trials:
        if trial.status is not TrialStatus.REPORTED or not trial.epochs:
            continue
        if trial.energy is None or trial.time is None:
            continue
        if profile is not None and trial.profile not in (None, profile):
            continue
        spent = price(trial.energy, trial.time)
        per_epoch.setdefault(trial.batch_size, []).append(spent / trial.epochs)
        if trial.converged:
            took.setdefault(trial.batch_size, []).append(trial.epochs)
    return Prior.of(
        costs,
        hopeless,
        {size: math.fsum(c) / len(c) for size, c in per_epoch.items()},
        mode,
        epochs={size: sum(e) / len(e) for size, e in took.items()},
        parent=parent,
    )


def bandit_credit(
    settings: PruningSettings, prior: Prior, explorations: Iterable[TrialState]
) -> int:
    """The bandit trials a job's prior stands for (`TRUSTED_PULLS`): a trusted one whose walk
    is over and held; else none."""
    if prior.mode is not PriorMode.TRUST:
        return 0
    return TRUSTED_PULLS if standing(settings, prior, explorations) == "over" else 0


def standing(
    settings: PruningSettings, prior: Prior, explorations: Iterable[TrialState]
) -> Literal["following", "over", "dropped"]:
    """Where a job stands with its prior: its runs follow the prior's walk, the walk is over
    (the bandit chooses among the sizes it found), or a run disagreed and the prior is dropped."""
    step = next_prior_step(settings, prior, explorations)
    if step is None:
        return "dropped"
    return "over" if isinstance(step, PruningDone) else "following"
