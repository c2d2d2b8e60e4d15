"""Regret and savings of simulated recurrences against the oracle and the default batch size."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import accumulate

from zeus_bso.sim.runner import Recurrence
from zeus_bso.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class SeedResult:
    """One seed's simulation, reduced to what the reports show."""

    seed: int
    costs: list[float]
    """Cost of each recurrence."""
    batch_sizes: list[int]
    """Batch size of each recurrence's last (successful) trial."""
    tries: int

    @property
    def total(self) -> float:
        """Cumulative cost over all recurrences."""
        return sum(self.costs)


@dataclass(frozen=True, slots=True)
class Summary:
    """A workload's simulation over several seeds."""

    workload: str
    gpu: str
    recurrences: int
    oracle_batch_size: int
    oracle_cost: float
    """Expected cost of one recurrence with the oracle batch size."""
    default_batch_size: int
    default_cost: float
    """Expected cost of one recurrence with the default batch size."""
    seeds: list[SeedResult]

    @property
    def regret(self) -> float:
        """Mean over seeds of cumulative cost / oracle cumulative cost."""
        return statistics.fmean(s.total / (self.recurrences * self.oracle_cost) for s in self.seeds)

    @property
    def savings(self) -> float:
        """Mean over seeds of the saving against always using the default (negative: dearer)."""
        return statistics.fmean(
            1.0 - s.total / (self.recurrences * self.default_cost) for s in self.seeds
        )

    def mean_cumulative(self) -> list[float]:
        """Cumulative cost after each recurrence, averaged over seeds."""
        series = [list(accumulate(s.costs)) for s in self.seeds]
        return [statistics.fmean(values) for values in zip(*series, strict=True)]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        return {
            "workload": self.workload,
            "gpu": self.gpu,
            "recurrences": self.recurrences,
            "oracle_batch_size": self.oracle_batch_size,
            "oracle_cost": self.oracle_cost,
            "default_batch_size": self.default_batch_size,
            "default_cost": self.default_cost,
            "regret": self.regret,
            "savings": self.savings,
            "seeds": [
                {
                    "seed": s.seed,
                    "total": s.total,
                    "regret": s.total / (self.recurrences * self.oracle_cost),
                    "tries": s.tries,
                    "costs": s.costs,
                    "batch_sizes": s.batch_sizes,
                }
                for s in self.seeds
            ],
        }


def seed_result(seed: int, recurrences: list[Recurrence]) -> SeedResult:
    """Reduce one seed's recurrences."""
    return SeedResult(
        seed=seed,
        costs=[r.cost for r in recurrences],
        batch_sizes=[r.trials[-1].batch_size for r in recurrences],
        tries=sum(len(r.trials) for r in recurrences),
    )


def summarize(
    trace: TraceJob, eta_knob: float, recurrences: int, seeds: list[SeedResult]
) -> Summary:
    """Compare the seeds' costs with the oracle and the default batch size."""
    oracle = trace.oracle_batch_size(eta_knob)
    return Summary(
        workload=trace.workload.name,
        gpu=trace.gpu,
        recurrences=recurrences,
        oracle_batch_size=oracle,
        oracle_cost=trace.expected_cost(oracle, eta_knob),
        default_batch_size=trace.default_batch_size,
        default_cost=trace.expected_cost(trace.default_batch_size, eta_knob),
        seeds=seeds,
    )
