"""The pruning stage: serial exploration rounds that narrow the batch sizes down to the arms.

Round 0 pivots on the default batch size. Each round tries the pivot, then the smaller batch
sizes in descending order, then the larger ones in ascending order (``prune_up_first``: larger
ones first); in each direction it stops at the first batch size that did not converge (or, with
``prune_cost_ratio``, that cost clearly more than the round's best). With a ``prune_stride``
above 1 a direction steps over batch sizes (every ``prune_stride``-th, the farthest included),
and the round then tries the untried neighbours of its cheapest batch size until the cheapest
has none. The next round tries only the batch sizes that converged, pivoting on the cheapest.
After the last round the converged batch sizes become the arms.

A batch size at or above the dispatching profile's memory cap (the smallest that ran out of
memory there) is passed over, and so is every larger one in that round: a direction walking
down goes on past it, one walking up ends there, once it has tried the sizes its stride
skipped on the way (their cost is unknown, not high). It is not counted as "did not converge". An
``infeasible`` exploration below the cap (another profile's, or one whose cap was forgotten)
says nothing of the dispatching profile's memory: the size is explored again.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from zeus_bso.errors import NoConvergedBatchSizeError, NoFittingBatchSizeError
from zeus_bso.policy.types import TrialState
from zeus_bso.spec import TrialStatus

if TYPE_CHECKING:
    from zeus_bso.spec import CreatedJob


PRIOR_ROUND = -1
"""The round of an exploration dispatched on a related job's word (`zeus_bso.policy.priors`)."""


@dataclass(frozen=True, slots=True)
class PruningSettings:
    """How a job prunes (from its options: `of`)."""

    batch_sizes: tuple[int, ...]
    """The batch sizes, ascending."""
    default_batch_size: int
    """Round 0's pivot."""
    rounds: int
    up_first: bool
    skip_other_direction: bool
    cost_ratio: float | None
    stride: int
    max_unreported_failures: int
    memory_cap: int | None = None
    """The dispatching profile's memory cap (`zeus_bso.policy.JobState.memory_caps`)."""
    profile: str = ""
    """The dispatching profile (for an error's message)."""

    @classmethod
    def of(
        cls, job: CreatedJob, memory_cap: int | None = None, profile: str = ""
    ) -> PruningSettings:
        """The job's pruning (``num_pruning_rounds``, ``prune_*``, ``max_unreported_failures``)
        for a run on ``profile``, whose memory cap is ``memory_cap``."""
        return cls(
            tuple(job.batch_sizes),
            job.default_batch_size,
            job.num_pruning_rounds,
            job.prune_up_first,
            job.prune_skip_other_direction,
            job.prune_cost_ratio,
            job.prune_stride,
            job.max_unreported_failures,
            memory_cap,
            profile,
        )


class Outcome(Enum):
    """What a batch size's explorations in a round say of it."""

    UNTRIED = "untried"
    IN_FLIGHT = "in_flight"
    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"


@dataclass(frozen=True, slots=True)
class ExploreNext:
    """Run an exploration of ``batch_size`` in ``round``."""

    batch_size: int
    round: int


@dataclass(frozen=True, slots=True)
class ExplorationInFlight:
    """An exploration is running; exploration is serial, so the next run is a concurrent one."""


@dataclass(frozen=True, slots=True)
class PruningDone:
    """Pruning is over; ``arms`` are the batch sizes that survived it."""

    arms: tuple[int, ...]


PruningStep = ExploreNext | ExplorationInFlight | PruningDone


def outcome_of(
    records: list[TrialState], max_unreported_failures: int
) -> tuple[Outcome, float | None]:
    reported = [r for r in records if r.status is TrialStatus.REPORTED]
    if reported:
        first = min(reported, key=lambda r: r.trial_number)
        if first.converged:
            return Outcome.CONVERGED, first.cost
        return Outcome.NOT_CONVERGED, None
    if any(r.status is TrialStatus.DISPATCHED for r in records):
        return Outcome.IN_FLIGHT, None
    # A run that ended without a single report counts as a failure, whether its client ended
    # it (failed: a crash caught by the client) or vanished before its first report (abandoned:
    # an OOM kill, a lost node). A run that vanished after reporting says nothing bad.
    failures = sum(
        r.status is TrialStatus.FAILED or (r.status is TrialStatus.ABANDONED and not r.reported)
        for r in records
    )
    if failures >= max_unreported_failures:
        return Outcome.NOT_CONVERGED, None
    return Outcome.UNTRIED, None


def next_pruning_step(
    settings: PruningSettings, explorations: tuple[TrialState, ...]
) -> PruningStep:
    """Walk the pruning rounds over the explorations so far and say what comes next.

    The first report of a batch size in a round decides its outcome there (a late report of an
    abandoned trial can add a second one). Trials that ended without any report count as
    failures: ended by their client (failed) or abandoned before their first report (their lease
    ran out: an OOM kill, a lost node). ``max_unreported_failures`` of them in one round mark
    the batch size as not converging in that round. A trial abandoned after it reported says
    nothing bad and is ignored.

    Raises:
        NoConvergedBatchSizeError: a round ended with no converged batch size.
    """
    by_round: dict[tuple[int, int], list[TrialState]] = defaultdict(list)
    for record in explorations:
        # A prior's walk (`zeus_bso.policy.priors`) explored before the first round: its runs
        # count as the first round's.
        by_round[(max(record.round or 0, 0), record.batch_size)].append(record)

    candidates = list(settings.batch_sizes)
    pivot = settings.default_batch_size
    for round_index in range(settings.rounds):
        walk = _Round(settings, round_index, by_round)
        lower = sorted((b for b in candidates if b < pivot), reverse=True)
        higher = sorted(b for b in candidates if b > pivot)
        # Upstream walks [pivot, smaller...] then [larger...]: a pivot that does not converge
        # also ends the downward walk. Up-first walks the pivot on its own, then [larger...],
        # then [smaller...]: the pivot's outcome says nothing about either direction.
        went = walk.step(pivot)
        if not isinstance(went, bool):
            return went
        walks = [(higher, True), (lower, False)] if settings.up_first else [(lower, False)]
        if not settings.up_first and went is False:
            walks = []  # the pivot did not converge: nor does the walk down go on
        if not settings.up_first:
            walks.append((higher, True))
        for index, (direction, up) in enumerate(walks):
            last = index == len(walks) - 1
            if last and settings.skip_other_direction and _improved(walk.converged, pivot):
                break
            # Past a pivot that ran out of memory, the size right below it comes first.
            past = not up and walk.cap is not None and pivot >= walk.cap
            needed = _direction(walk, direction, up, settings.stride, past)
            if needed is not None:
                return needed
        while settings.stride > 1 and walk.converged:
            untried = [
                b
                for b in neighbours(candidates, walk.cheapest())
                if b not in walk.tried and (walk.cap is None or b < walk.cap)
            ]
            if not untried:
                break
            went = walk.step(untried[0])
            if not isinstance(went, bool):
                return went
        if round_index == 0:
            walk.keep_off_the_walk(explorations)
        if not walk.converged:
            if walk.cap is not None and not walk.tried:
                raise NoFittingBatchSizeError(
                    round_index, sorted(walk.out_of_memory), walk.cap, settings.profile
                )
            raise NoConvergedBatchSizeError(round_index, sorted(walk.tried))
        candidates = sorted(walk.converged)
        pivot = walk.cheapest()
    return PruningDone(arms=tuple(candidates))


class _Round:
    """One pruning round replayed over its explorations: the batch sizes tried and the costs
    of those that converged."""

    def __init__(
        self,
        settings: PruningSettings,
        round_index: int,
        by_round: dict[tuple[int, int], list[TrialState]],
    ) -> None:
        self.settings = settings
        self.round = round_index
        self.by_round = by_round
        self.converged: dict[int, float] = {}
        self.tried: list[int] = []
        self.cap: int | None = settings.memory_cap
        """The smallest batch size known not to fit: it and larger ones are passed over."""
        self.out_of_memory: list[int] = []
        """The batch sizes passed over at the cap whose explorations in the round ran out."""

    def cheapest(self) -> int:
        return min(self.converged, key=lambda b: (self.converged[b], b))

    def keep_off_the_walk(self, explorations: tuple[TrialState, ...]) -> None:
        """Count as converged in this round the sizes a dropped prior's walk saw converge that
        this walk did not step (`zeus_bso.policy.priors`): the early-stop reference knows their
        cost, and a next round without them would judge its sizes against a cheaper size it
        does not run. A cold job has none."""
        for size in sorted({r.batch_size for r in explorations if r.round == PRIOR_ROUND}):
            if size in self.tried or size in self.converged:
                continue
            if self.cap is not None and size >= self.cap:
                continue
            records = [r for r in self.by_round.get((0, size), []) if r.round == PRIOR_ROUND]
            records = [r for r in records if r.status is not TrialStatus.INFEASIBLE]
            outcome, cost = outcome_of(records, self.settings.max_unreported_failures)
            if outcome is Outcome.CONVERGED and cost is not None:
                self.converged[size] = cost

    def step(self, batch_size: int) -> ExploreNext | ExplorationInFlight | bool:
        """The exploration ``batch_size`` needs next, or its outcome in this round: True, the
        walk goes on past it; False, its direction ends there (it did not converge, or cost
        clearly more than the round's cheapest). A batch size at or above one that ran out of
        memory is passed over (True: the walk down goes on; the walk up tries nothing more)."""
        records = self.by_round.get((self.round, batch_size), [])
        if self.cap is not None and batch_size >= self.cap:
            if any(r.status is TrialStatus.INFEASIBLE for r in records):
                self.out_of_memory.append(batch_size)
            return True
        # An exploration that ran out of memory below the dispatching profile's cap (on another
        # profile's GPUs, or before its cap was forgotten) says nothing of whether the size fits
        # here: it is explored again.
        records = [r for r in records if r.status is not TrialStatus.INFEASIBLE]
        outcome, cost = outcome_of(records, self.settings.max_unreported_failures)
        if outcome is Outcome.IN_FLIGHT:
            return ExplorationInFlight()
        if outcome is Outcome.UNTRIED:
            return ExploreNext(batch_size=batch_size, round=self.round)
        self.tried.append(batch_size)
        if outcome is Outcome.NOT_CONVERGED:
            return False
        # A converged report always carries its cost; without one it can't be a pivot.
        cost = math.inf if cost is None else cost
        ratio = self.settings.cost_ratio
        if ratio is not None and self.converged and cost > ratio * min(self.converged.values()):
            return False  # clearly costlier than the round's best: the direction ends here
        self.converged[batch_size] = cost
        return True


def _direction(
    walk: _Round, sizes: list[int], up: bool, stride: int, past: bool = False
) -> ExploreNext | ExplorationInFlight | None:
    """Walk one direction of a round: ``sizes`` in walking order (away from the pivot), every
    ``stride``-th (the farthest one included). The exploration it needs next, or None once the
    direction is over (a size that did not converge, or the last).

    Walking up, a size that ran out of memory (at or above the memory cap) has an unknown
    cost, not a high one: the sizes the stride skipped on the way to it, below the cap, are
    tried one by one before the walk turns (every larger one runs out too), so the stride
    applies to sizes known to fit. Walking down, the size right below one that ran out of
    memory comes next, not the stride's (the first of ``sizes``, ``past`` a pivot that ran out):
    the largest that may fit (passing over 8 for 4, from 16, left a job whose 4 did not converge
    with none that did, and 8 untried). Without a cap the walk is what it always was."""
    index = 0 if past else stride - 1
    stepped = -1  # the index of the last size stepped
    while True:
        if index >= len(sizes):
            if stepped >= len(sizes) - 1:
                return None
            index = len(sizes) - 1  # the farthest one, which the stride stepped over
        size = sizes[index]
        went = walk.step(size)
        if not isinstance(went, bool):
            return went
        if walk.cap is not None and size >= walk.cap:  # it ran out of memory (now or before)
            if up:
                for skipped in sizes[stepped + 1 : index]:
                    if skipped >= walk.cap:
                        break
                    went = walk.step(skipped)
                    if not isinstance(went, bool):
                        return went
                    if went is False:
                        break
                return None  # every larger size runs out too
            stepped, index = index, index + 1
            continue
        if went is False:
            return None
        stepped, index = index, index + stride


def neighbours(candidates: list[int], batch_size: int) -> list[int]:
    """The batch sizes next to ``batch_size`` among the round's candidates (sorted)."""
    at = candidates.index(batch_size)
    return [candidates[i] for i in (at - 1, at + 1) if 0 <= i < len(candidates)]


def _improved(converged: dict[int, float], pivot: int) -> bool:
    """Whether a batch size other than the pivot converged cheaper than the pivot."""
    if pivot not in converged:
        return False
    return any(cost < converged[pivot] for b, cost in converged.items() if b != pivot)
