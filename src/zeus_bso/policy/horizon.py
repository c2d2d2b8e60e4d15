"""Short-lived jobs: a job that says how many times it will run (``expected_recurrences``)
explores only while what an exploration may lose still fits within them.

The rule is a budget over the whole horizon. Always running the default batch size would cost
the job ``N * D`` over its ``N`` recurrences (``D``: the default's measured cost, the mean of its
converged runs). The job may spend at most `HORIZON_SLACK` more: with ``S`` spent so far over
its runs, ``done`` recurrences done (runs that converged) and ``B`` the cheapest batch size's
mean cost, the recurrences left cost ``(N - done) * B`` if they all run at the cheapest, so one
more exploration may lose at most::

    allowance = (1 + HORIZON_SLACK) * N * D - S - (N - done) * B

The next run explores only while a later recurrence is left to use what it finds and the
allowance holds `EXPLORATION_RESERVE` of a run at the cheapest (what an exploration that does
not pay typically loses before its cost bounds stop it); otherwise it takes the cheapest batch
size so far (`zeus_bso.policy.types.TrialKind.EXPLOIT`) and pruning waits (`Horizon.
may_explore`). A saving found raises the allowance (``B`` falls), a loss lowers it. A job that
ran its ``N`` runs is expected to run as many times again as it ran (`Horizon.horizon`), so it
explores again as far as that longer horizon pays. A run, once started, is bounded by the
job's cost bounds as any other.

On the trace (`benchmarks/regret.py --horizons`): with ``expected_recurrences=5`` no workload
costs more than 2% over always running the default (without it, up to 29%), because a job that
short seldom explores at all; at 10 and more the budget seldom binds, and the regret is the cold
start's.

Without a converged run nothing is bounded yet (the first runs are the default's, or a prior's
best); before the default converged, the cheapest run stands in for ``D``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zeus_bso.policy.types import BatchSizeStats

HORIZON_SLACK = 0.03
"""How much more than always running the default a job with ``expected_recurrences`` may spend
over them, as a fraction."""

EXPLORATION_RESERVE = 0.2
"""The part of a run at the cheapest batch size the allowance must hold for the next run to
explore. On the trace an exploration that does not pay loses 0.2-0.3 of a run before its cost
bounds stop it; with 0.1, jobs of 5 recurrences cost up to 29% more than the default (P100
imagenet, whose other size never converges)."""


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

    @classmethod
    def of(
        cls, recurrences: int, stats: Mapping[int, BatchSizeStats], default_batch_size: int
    ) -> Horizon:
        """The horizon of a job expecting ``recurrences`` runs, from its batch sizes' ``stats``."""
        means = [m for entry in stats.values() if (m := entry.converged.mean) is not None]
        default = stats.get(default_batch_size)
        return cls(
            recurrences,
            sum(entry.converged_count for entry in stats.values()),
            sum(entry.paid for entry in stats.values()),
            None if default is None else default.converged.mean,
            min(means, default=None),
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
    def allowance(self) -> float | None:
        """What one more exploration may lose (None: nothing converged, nothing bounded)."""
        if self.best_cost is None:
            return None
        reference = self.best_cost if self.default_cost is None else self.default_cost
        budget = (1.0 + HORIZON_SLACK) * self.horizon * reference
        return budget - self.spent - self.left * self.best_cost

    def may_explore(self) -> bool:
        """Whether the next run may explore: a later recurrence is left to use what it finds,
        and the budget has something left to lose."""
        allowance = self.allowance
        if allowance is None:
            return True
        assert self.best_cost is not None
        return self.left >= 2 and allowance > EXPLORATION_RESERVE * self.best_cost
