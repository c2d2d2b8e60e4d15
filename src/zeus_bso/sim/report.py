"""Regret and savings of simulated recurrences against the oracle and the default batch size,
the floor of a policy without prior knowledge, and where the regret goes (`CAUSES`)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from types import MappingProxyType

from zeus_bso.policy.power import profiles_power
from zeus_bso.sim.runner import Recurrence, TrialOutcome
from zeus_bso.sim.trace import TraceJob
from zeus_bso.spec import TrialKind

CAUSES = MappingProxyType(
    {
        "first_run": "first run",
        "stopped_exploration": "stopped expl.",
        "converged_exploration": "converged expl.",
        "bandit_off_oracle": "bandit off oracle",
        "stopped_bandit": "stopped bandit",
        "oracle_noise": "oracle noise",
    }
)
"""Where a simulation's excess cost over the oracle's goes, by cause (and its column's label): the
job's first run (the default's, in a cold start); explorations stopped before the target;
explorations that converged at sizes other than the oracle's; bandit runs (and a short-lived job's
runs at the cheapest size so far, `TrialKind.EXPLOIT`) that converged at such sizes; bandit runs
stopped before the target; runs at the oracle size (the trace's spread, negative when luckier than
its mean). Each run is charged to one cause: a stopped run, all its cost; a converged run, its cost
above the oracle's expected cost (a recurrence that never converged owes one oracle run less,
charged to its last run)."""


def causes_of(
    recurrences: Sequence[Sequence[TrialOutcome]], oracle_batch_size: int, oracle_cost: float
) -> dict[str, float]:
    """The excess cost (J) of one simulation charged to each of `CAUSES`; they add up to its
    cumulative cost minus as many oracle runs as recurrences."""
    charged = dict.fromkeys(CAUSES, 0.0)
    for index, trials in enumerate(recurrences):
        for position, trial in enumerate(trials):
            excess = trial.cost - oracle_cost if trial.converged else trial.cost
            if position == len(trials) - 1 and not trial.converged:
                excess -= oracle_cost  # the recurrence owes no converged run
            exploring = trial.kind == TrialKind.EXPLORATION
            if index == 0 and position == 0:
                cause = "first_run"
            elif not trial.converged:
                cause = "stopped_exploration" if exploring else "stopped_bandit"
            elif trial.batch_size == oracle_batch_size:
                cause = "oracle_noise"
            else:
                cause = "converged_exploration" if exploring else "bandit_off_oracle"
            charged[cause] += excess
    return charged


def over_the_default(recurrences: Sequence[Sequence[TrialOutcome]], default: int) -> list[float]:
    """Each run at a size other than ``default``, as a multiple of the mean cost of the
    default's converged runs before it (``max_run_cost_ratio``'s reference), from the default's
    first converged run on."""
    defaults: list[float] = []
    ratios = []
    for trials in recurrences:
        for trial in trials:
            if trial.batch_size == default:
                defaults += [trial.cost] if trial.converged else []
            elif defaults:
                ratios.append(trial.cost / statistics.fmean(defaults))
    return ratios


@dataclass(frozen=True, slots=True)
class SeedResult:
    """One seed's simulation, reduced to what the reports show."""

    seed: int
    costs: list[float]
    """Cost of each recurrence."""
    batch_sizes: list[int]
    """Batch size of each recurrence's last (successful) trial."""
    tries: int
    trials: tuple[tuple[TrialOutcome, ...], ...] = field(default=(), repr=False)
    """Each recurrence's runs."""

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
    memory_cap: int | None = None
    """The smallest batch size that ran out of memory (None: every size fit); the oracle is
    the cheapest size below it, or, with `accumulate`, the cheapest with sizes from the cap on
    reached by gradient accumulation."""
    accumulate: bool = False
    power_limits: bool = False
    """Whether runs profiled the GPU's power limits and trained at the cheapest; the regret is
    still against the batch-size-only oracle at the maximum power (`oracle_cost`)."""
    joint_oracle_cost: float | None = None
    """With `power_limits`: the expected cost of a recurrence at the best batch size and power
    limit together."""
    power_floor_cost: float | None = None
    """With `power_limits` (where runs profile): the expected cumulative cost of the cold start
    with them (`TraceJob.power_floor`), which `floor` is then."""
    power_oracle: tuple[int, float] | None = None
    """With `power_limits` (where runs profile): the batch size and the expected cost of a
    recurrence of the oracle of runs that profile (`TraceJob.power_oracle`), which `causes`
    charge against then."""
    trace: TraceJob | None = field(default=None, repr=False, compare=False)
    """The workload's trace, for `at` (its floor at another horizon)."""
    eta_knob: float = 0.5

    def at(self, horizon: int) -> Summary:
        """The same simulation judged after its first ``horizon`` recurrences (a job that ran
        only that many times: the policy does not know the horizon, so the prefix is that
        job's simulation)."""
        if not 1 <= horizon <= self.recurrences:
            raise ValueError(f"horizon {horizon} is not within 1-{self.recurrences} recurrences")
        if self.trace is None:
            raise ValueError("this summary keeps no trace to judge another horizon against")
        seeds = [
            replace(
                s,
                costs=s.costs[:horizon],
                batch_sizes=s.batch_sizes[:horizon],
                tries=sum(len(t) for t in s.trials[:horizon]),
                trials=s.trials[:horizon],
            )
            for s in self.seeds
        ]
        return summarize(
            self.trace,
            self.eta_knob,
            horizon,
            seeds,
            self.memory_cap,
            self.accumulate,
            self.power_limits,
        )

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

    @property
    def floor(self) -> float:
        """The regret of a policy that runs the default once and then knows the oracle: what no
        policy without prior knowledge of the job can beat (in expectation). With
        `power_limits`, the oracle is the joint one, and both first runs profile."""
        if self.power_floor_cost is not None:
            return self.power_floor_cost / (self.recurrences * self.oracle_cost)
        excess = self.default_cost - self.oracle_cost
        return 1.0 + excess / (self.recurrences * self.oracle_cost)

    def causes(self) -> dict[str, float]:
        """Points of regret by cause (`CAUSES`): excess cost in % of the oracle's cumulative
        cost, mean over seeds; with `charged_from` (1 without `power_oracle`), they add up to
        `regret` x 100. With `power_oracle`, the excess is over that oracle's runs."""
        total = self.recurrences * self.oracle_cost
        size, cost = self.power_oracle or (self.oracle_batch_size, self.oracle_cost)
        per_seed = [causes_of(s.trials, size, cost) for s in self.seeds]
        return {c: statistics.fmean(100 * p[c] / total for p in per_seed) for c in CAUSES}

    @property
    def charged_from(self) -> float:
        """The regret the `causes` start from: 1, or with `power_oracle`, its cost over the
        batch-size-only oracle's."""
        return 1.0 if self.power_oracle is None else self.power_oracle[1] / self.oracle_cost

    @property
    def joint_oracle_regret(self) -> float | None:
        """The joint oracle's cost over the batch-size-only oracle's (None: not simulated)."""
        if self.joint_oracle_cost is None:
            return None
        return self.joint_oracle_cost / self.oracle_cost

    def over_the_default(self) -> list[float]:
        """`over_the_default` of every seed's runs, together."""
        return [r for s in self.seeds for r in over_the_default(s.trials, self.default_batch_size)]

    def out_of_memory_starts(self) -> list[dict[int, int]]:
        """Per seed, the starts that ran out of memory, by batch size."""
        return [
            dict(Counter(t.batch_size for runs in s.trials for t in runs if t.out_of_memory))
            for s in self.seeds
        ]

    def mean_cumulative(self) -> list[float]:
        """Cumulative cost after each recurrence, averaged over seeds."""
        series = [list(accumulate(s.costs)) for s in self.seeds]
        return [statistics.fmean(values) for values in zip(*series, strict=True)]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        capped: dict[str, object] = {}
        if self.power_limits:  # absent without them, as the memory cap's figures
            capped["power_limits"] = True
            capped["joint_oracle_cost"] = self.joint_oracle_cost
            capped["joint_oracle_regret"] = self.joint_oracle_regret
            if self.power_oracle is not None:
                capped["power_oracle_batch_size"] = self.power_oracle[0]
                capped["power_oracle_cost"] = self.power_oracle[1]
        if self.memory_cap is not None:  # absent without one: those figures stay as they were
            capped |= {
                "memory_cap": self.memory_cap,
                "accumulate": self.accumulate,
                "out_of_memory_starts": [
                    {str(size): count for size, count in sorted(starts.items())}
                    for starts in self.out_of_memory_starts()
                ],
            }
        return {
            **capped,
            "workload": self.workload,
            "gpu": self.gpu,
            "recurrences": self.recurrences,
            "oracle_batch_size": self.oracle_batch_size,
            "oracle_cost": self.oracle_cost,
            "default_batch_size": self.default_batch_size,
            "default_cost": self.default_cost,
            "regret": self.regret,
            "floor": self.floor,
            "causes": self.causes(),
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
        trials=tuple(tuple(r.trials) for r in recurrences),
    )


def summarize(
    trace: TraceJob,
    eta_knob: float,
    recurrences: int,
    seeds: list[SeedResult],
    memory_cap: int | None = None,
    accumulate: bool = False,
    power_limits: bool = False,
) -> Summary:
    """Compare the seeds' costs with the oracle (the cheapest size below ``memory_cap``, or with
    ``accumulate`` the cheapest with sizes from the cap on accumulated) and the default."""
    if accumulate and memory_cap is not None:
        trace, memory_cap_of_oracle = trace.accumulated(memory_cap), None
    else:
        memory_cap_of_oracle = memory_cap
    oracle = trace.oracle_batch_size(eta_knob, memory_cap_of_oracle)
    joint = trace.joint_oracle(eta_knob)[1] if power_limits else None
    # Where nothing is profiled (at eta 0), the batch-size-only floor holds.
    profiling = profiles_power(eta_knob, power_limits)
    floor = trace.power_floor(eta_knob, recurrences) if profiling else None
    return Summary(
        trace=trace,
        eta_knob=eta_knob,
        power_limits=power_limits,
        joint_oracle_cost=joint,
        power_floor_cost=floor,
        power_oracle=trace.power_oracle(eta_knob) if profiling else None,
        memory_cap=memory_cap,
        accumulate=accumulate and memory_cap is not None,
        workload=trace.workload.name,
        gpu=trace.gpu,
        recurrences=recurrences,
        oracle_batch_size=oracle,
        oracle_cost=trace.expected_cost(oracle, eta_knob),
        default_batch_size=trace.default_batch_size,
        default_cost=trace.expected_cost(trace.default_batch_size, eta_knob),
        seeds=seeds,
    )


def causes_rows(summaries: Sequence[Summary]) -> tuple[list[str], list[list[str]]]:
    """Where the regret goes, as a table: a header, then per workload its regret, its floor and
    its points by cause (`Summary.causes`), and with several workloads their mean."""
    header = ["workload", "regret", "floor", *CAUSES.values()]
    rows, columns = [], []
    for s in summaries:
        values = [s.regret, s.floor, *s.causes().values()]
        columns.append(values)
        rows.append([s.workload, *_formatted(values)])
    if len(summaries) > 1:
        means = [statistics.fmean(c) for c in zip(*columns, strict=True)]
        rows.append(["mean", *_formatted(means)])
    return header, rows


def _formatted(values: Sequence[float]) -> list[str]:
    regret, floor, *points = values
    return [f"{regret:.3f}", f"{floor:.3f}", *(f"{p:.2f}" for p in points)]


def causes_markdown(summaries: Sequence[Summary]) -> str:
    """`causes_rows` as a Markdown table."""
    return _markdown(*causes_rows(summaries))


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, its first column left-aligned, the others right."""
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


HORIZONS = (5, 10, 20, 50)
"""The recurrences after which `horizon_rows` judges a simulation: most jobs are re-configured
(a new job) long before their 50th run."""


def horizon_rows(summaries: Sequence[Summary]) -> tuple[list[str], list[list[str]]]:
    """Regret at each of `HORIZONS` within the simulated recurrences (and at their number), as a
    table: a header, then per workload its regret and floor at each horizon (``1.212/1.111``),
    and with several workloads their mean and the worst workload against always running the
    default (``+12.8%``: dearer)."""
    most = min(s.recurrences for s in summaries)
    horizons = sorted({h for h in HORIZONS if h <= most} | {most})
    return judged_rows({h: [s.at(h) for s in summaries] for h in horizons})


def judged_rows(judged: Mapping[int, Sequence[Summary]]) -> tuple[list[str], list[list[str]]]:
    """`horizon_rows`'s table from the workloads' summaries judged at each horizon (``judged``,
    by horizon, the workloads in the same order at each: the same simulations' prefixes, or a
    simulation of each horizon of its own)."""
    horizons = sorted(judged)
    first = judged[horizons[0]]
    header = ["workload", *(f"at {h}" for h in horizons)]
    rows = [
        [s.workload, *(f"{judged[h][i].regret:.3f}/{judged[h][i].floor:.3f}" for h in horizons)]
        for i, s in enumerate(first)
    ]
    if len(first) > 1:
        rows.append(
            [
                "mean",
                *(
                    f"{statistics.fmean(x.regret for x in judged[h]):.3f}"
                    f"/{statistics.fmean(x.floor for x in judged[h]):.3f}"
                    for h in horizons
                ),
            ]
        )
    rows.append(
        [
            "worst vs default",
            *(f"{max(-x.savings for x in judged[h]) * 100:+.1f}%" for h in horizons),
        ]
    )
    return header, rows


def horizon_markdown(summaries: Sequence[Summary]) -> str:
    """`horizon_rows` as a Markdown table."""
    return _markdown(*horizon_rows(summaries))


def judged_markdown(judged: Mapping[int, Sequence[Summary]]) -> str:
    """`judged_rows` as a Markdown table."""
    return _markdown(*judged_rows(judged))
