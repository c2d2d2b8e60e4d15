"""The NSDI'23 Zeus traces (shipped as package data) and the six recurring jobs built on them.

A workload's batch sizes are those present for its (dataset, network, optimizer) in both the
training trace and the GPU's power trace. The GPU runs at its maximum power limit (the largest
``power_limit`` in its power trace), which is also ``max_power`` in the cost.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib.resources import files

from zeus_bso.errors import TraceError
from zeus_bso.policy import zeus_cost
from zeus_bso.policy.power import profile_goes_on, too_slow, within_slowdown

GPUS = ("v100", "p100")


@dataclass(frozen=True, slots=True)
class Workload:
    """A recurring job of the benchmark, as in the Zeus paper's trace-driven experiments."""

    name: str
    dataset: str
    network: str
    optimizer: str
    target_metric: float
    higher_is_better: bool
    max_epochs: int
    default_batch_size: int


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("cifar100", "cifar100", "shufflenetv2", "adadelta", 0.6, True, 100, 1024),
        Workload("imagenet", "imagenet", "resnet50", "adadelta", 0.65, True, 100, 256),
        Workload("squad", "squad", "bert_base_uncased", "adamw", 84.0, True, 6, 32),
        Workload("librispeech", "librispeech", "deepspeech2", "adamw", 40.0, False, 16, 256),
        Workload("movielens-1m", "movielens-1m", "ncf", "adam", 0.41, True, 100, 1024),
        Workload("sentiment140", "sentiment140", "bert_base_uncased", "adamw", 0.84, True, 10, 128),
    )
}


@dataclass(frozen=True, slots=True)
class BatchSizeProfile:
    """What the trace says of one batch size at the GPU's maximum power limit."""

    batch_size: int
    time_per_epoch: float
    average_power: float
    target_epochs: tuple[float, ...]
    """Per run, the epoch at which it reached the target (``nan``: never)."""
    curves: tuple[tuple[tuple[int, float], ...], ...] = ()
    """Per run (in the order of ``target_epochs``), its learning curve as the trace records it:
    ``(epoch, metric)`` for each metric threshold the run reached, in epoch order."""
    start_metric: float = 0.0
    """The metric before a run reaches the trace's first threshold: one threshold step worse."""

    def metric_at(self, run: int, epoch: int, higher_is_better: bool) -> float:
        """Run ``run``'s metric after ``epoch`` epochs: the best threshold it had reached by
        then (the trace's resolution), or `start_metric` before the first."""
        reached = [metric for at, metric in self.curves[run] if at <= epoch]
        if not reached:
            return self.start_metric
        return max(reached) if higher_is_better else min(reached)


@dataclass(frozen=True, slots=True)
class Pace:
    """An epoch of one batch size at one GPU power limit, as the power trace measured it."""

    power_limit: float
    time_per_epoch: float
    average_power: float


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A workload on a GPU: its batch sizes, their epoch costs and training runs."""

    workload: Workload
    gpu: str
    max_power: float
    default_batch_size: int
    profiles: dict[int, BatchSizeProfile]
    paces: dict[int, tuple[Pace, ...]] = field(default_factory=dict)
    """Per batch size, its epoch at every power limit the trace measured, lowest first (the
    power-limit dimension; `profiles` are at `max_power`)."""
    max_slowdown: float | None = None
    """The job's ``power_max_slowdown``: a limit is chosen only if its epoch takes at most this
    many times the epoch at the highest limit (None: any)."""

    def pace_cost(self, pace: Pace, eta_knob: float) -> float:
        """Cost of one epoch at ``pace`` (in the GPU's units: its maximum power prices time)."""
        return zeus_cost(
            pace.time_per_epoch * pace.average_power, pace.time_per_epoch, eta_knob, self.max_power
        )

    def best_pace(
        self, batch_size: int, eta_knob: float, paces: Sequence[Pace] | None = None
    ) -> Pace:
        """The power limit whose epoch of ``batch_size`` costs least (the highest on a tie),
        among ``paces`` (default: every limit the trace measured) within `max_slowdown`."""
        candidates = within_slowdown(
            self.paces[batch_size] if paces is None else paces, self.max_slowdown
        )
        return min(candidates, key=lambda p: (self.pace_cost(p, eta_knob), -p.power_limit))

    def chosen_pace(self, batch_size: int, eta_knob: float) -> Pace:
        """The limit a client trains ``batch_size`` at: the cheapest it profiled (`profiled`)."""
        return self.best_pace(batch_size, eta_knob, self.profiled(batch_size, eta_knob))

    def profiled(self, batch_size: int, eta_knob: float) -> tuple[Pace, ...]:
        """The limits a client profiles, as it does: from the highest down, while
        `profile_goes_on` (a limit slower than `max_slowdown` allows ends it)."""
        kept: list[Pace] = []
        for pace in sorted(self.paces[batch_size], key=lambda p: -p.power_limit):
            kept.append(pace)
            costs = [
                math.inf
                if too_slow(p.time_per_epoch, kept[0].time_per_epoch, self.max_slowdown)
                else self.pace_cost(p, eta_knob)
                for p in kept
            ]
            if not profile_goes_on(costs):
                break
        return tuple(kept)

    def profiling_pace(self, batch_size: int, eta_knob: float | None = None) -> Pace:
        """An epoch spent profiling the power limits: the mean time and the mean energy over
        the limits profiled (a power that gives that energy over that time): with ``eta_knob``
        those a client profiles (`profiled`), without every one."""
        paces = self.paces[batch_size] if eta_knob is None else self.profiled(batch_size, eta_knob)
        seconds = sum(p.time_per_epoch for p in paces) / len(paces)
        joules = sum(p.time_per_epoch * p.average_power for p in paces) / len(paces)
        return Pace(math.nan, seconds, joules / seconds)

    def joint_oracle(self, eta_knob: float) -> tuple[int, float]:
        """The batch size and power limit with the lowest expected cost, and that cost."""
        return self._cheapest(lambda b: self.paced_cost(b, eta_knob, self.best_pace(b, eta_knob)))

    def _cheapest(self, cost: Callable[[int], float]) -> tuple[int, float]:
        """The batch size whose ``cost`` is lowest (the smallest on a tie), and that cost."""
        costs = {b: cost(b) for b in self.batch_sizes}
        best = min(costs, key=lambda b: (costs[b], b))
        return best, costs[best]

    def paced_cost(self, batch_size: int, eta_knob: float, pace: Pace) -> float:
        """The expected cost of a recurrence of ``batch_size`` whose epochs run at ``pace``."""
        return self.expected_cost(batch_size, eta_knob, self.pace_cost(pace, eta_knob))

    def power_floor(self, eta_knob: float, recurrences: int) -> float:
        """The expected cost of ``recurrences`` recurrences for a policy that must start at the
        default batch size but knows everything else, with power limits: the default's first
        run profiles (`profiling_pace`), then every run is at the batch size that costs least
        at its chosen limit (`chosen_pace`), whose own first run profiles too; it stays at the
        default if that is cheaper. No policy that learns the job can beat it in expectation
        (`Summary.floor`)."""

        def first(b: int) -> float:
            extra = self.pace_cost(self.profiling_pace(b, eta_knob), eta_knob)
            return self.trained_cost(b, eta_knob) + extra - self.chosen_epoch_cost(b, eta_knob)

        if recurrences < 1:
            return 0.0
        default = self.default_batch_size
        stay = first(default) + (recurrences - 1) * self.trained_cost(default, eta_knob)
        best, cost = self.power_oracle(eta_knob)
        if recurrences == 1 or best == default:
            return stay
        return min(stay, first(default) + first(best) + (recurrences - 2) * cost)

    def chosen_epoch_cost(self, batch_size: int, eta_knob: float) -> float:
        """The cost of an epoch of ``batch_size`` at the limit a client trains it at."""
        return self.pace_cost(self.chosen_pace(batch_size, eta_knob), eta_knob)

    def trained_cost(self, batch_size: int, eta_knob: float) -> float:
        """The expected cost of a recurrence of ``batch_size`` at the limit a client trains it
        at (`chosen_pace`), once profiled."""
        return self.paced_cost(batch_size, eta_knob, self.chosen_pace(batch_size, eta_knob))

    def power_oracle(self, eta_knob: float) -> tuple[int, float]:
        """The batch size that costs least at the limit a client trains it at, and that cost:
        the oracle of runs that profile (the `joint_oracle` may pick a limit below where the
        profile stopped)."""
        return self._cheapest(lambda b: self.trained_cost(b, eta_knob))

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes offered to the optimizer."""
        return sorted(self.profiles)

    def epoch_cost(self, batch_size: int, eta_knob: float) -> float:
        """Cost of one epoch of ``batch_size``."""
        p = self.profiles[batch_size]
        return zeus_cost(
            p.time_per_epoch * p.average_power, p.time_per_epoch, eta_knob, self.max_power
        )

    def converges(self, target_epoch: float) -> bool:
        """Whether a run that reaches the target at ``target_epoch`` converges in time."""
        return not math.isnan(target_epoch) and target_epoch <= self.workload.max_epochs

    def expected_cost(
        self, batch_size: int, eta_knob: float, epoch_cost: float | None = None
    ) -> float:
        """Expected cost of one recurrence that always uses ``batch_size``, retrying failures
        (an epoch costing ``epoch_cost``, by default `epoch_cost`'s at the maximum power).

        Mean over converging runs of their cost, plus ``(1 - p) / p`` failed runs of
        ``max_epochs`` each; infinite when no run converges.
        """
        epochs = self.profiles[batch_size].target_epochs
        converging = [e for e in epochs if self.converges(e)]
        if not converging:
            return math.inf
        p = len(converging) / len(epochs)
        cost = self.epoch_cost(batch_size, eta_knob) if epoch_cost is None else epoch_cost
        mean = sum(converging) / len(converging) * cost
        return mean + (1 - p) / p * self.workload.max_epochs * cost

    def micro_batch_size(self, batch_size: int, limit: int) -> int | None:
        """The largest of the trace's batch sizes at most ``limit`` that divides ``batch_size``
        (the micro-batch that accumulates to it), or None."""
        fitting = [b for b in self.batch_sizes if b <= limit and batch_size % b == 0]
        return max(fitting) if fitting else None

    def accumulated(self, memory_cap: int) -> TraceJob:
        """This job on a GPU where batch sizes from ``memory_cap`` on train by gradient
        accumulation: each such size keeps its runs (epochs to the target, learning curves)
        and takes the time per epoch and power of its micro-batch (`micro_batch_size` below the
        cap), which processes the epoch's samples. A size without such a micro-batch is left
        out."""
        profiles: dict[int, BatchSizeProfile] = {}
        for size, profile in self.profiles.items():
            if size < memory_cap:
                profiles[size] = profile
                continue
            micro = self.micro_batch_size(size, memory_cap - 1)
            if micro is not None:
                pace = self.profiles[micro]
                profiles[size] = replace(
                    profile, time_per_epoch=pace.time_per_epoch, average_power=pace.average_power
                )
        return replace(self, profiles=profiles)

    def oracle_batch_size(self, eta_knob: float, memory_cap: int | None = None) -> int:
        """The batch size with the lowest expected cost (below ``memory_cap``, the smallest
        that does not fit, if given)."""
        sizes = [b for b in self.batch_sizes if memory_cap is None or b < memory_cap]
        return min(sizes, key=lambda b: (self.expected_cost(b, eta_knob), b))


def _data(name: str) -> list[dict[str, str]]:
    text = (files("zeus_bso.sim") / "data" / name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@cache
def _train_rows() -> list[dict[str, str]]:
    return _data("summary_train.csv")


@cache
def _power_rows(gpu: str) -> list[dict[str, str]]:
    return _data(f"summary_power_{gpu}.csv")


def power_limits(gpu: str) -> list[float]:
    """The power limits (W) the trace of ``gpu`` measured, lowest first."""
    return sorted({float(r["power_limit"]) for r in _power_rows(gpu)})


def read_power_trace(path: str) -> list[dict[str, str]]:
    """A power trace of one's own GPUs, in the shipped one's columns (dataset, network,
    batch_size, optimizer, power_limit, time_per_epoch, average_power).

    Raises:
        TraceError: the file cannot be read or lacks a column.
    """
    needed = {"dataset", "network", "batch_size", "optimizer", "power_limit"}
    needed |= {"time_per_epoch", "average_power"}
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as err:
        raise TraceError(f"cannot read the power trace {path}: {err.strerror}") from None
    missing = needed - set(rows[0] if rows else {})
    if missing:
        raise TraceError(
            f"the power trace {path} lacks the column(s) {', '.join(sorted(missing))}; it needs "
            + ", ".join(sorted(needed))
        )
    return rows


def load_trace_job(
    workload: str,
    gpu: str,
    power_limit: float | None = None,
    power_rows: list[dict[str, str]] | None = None,
) -> TraceJob:
    """The trace job of ``workload`` on ``gpu``, at its highest power limit, or at
    ``power_limit`` (W, one the trace measured): a slower GPU whose maximum power is that limit,
    for checking the policy on speeds and powers it was not tuned on. ``power_rows``: a power
    trace of one's own (`read_power_trace`) in place of the shipped one of ``gpu``.

    Raises:
        TraceError: unknown workload or GPU, or a power limit the trace does not have.
    """
    if workload not in WORKLOADS:
        raise TraceError(f"unknown workload {workload!r}; choose one of {sorted(WORKLOADS)}")
    if gpu not in GPUS:
        raise TraceError(f"unknown GPU {gpu!r}; the shipped traces cover {list(GPUS)}")
    w = WORKLOADS[workload]

    def ours(row: dict[str, str]) -> bool:
        return (row["dataset"], row["network"], row["optimizer"]) == (
            w.dataset,
            w.network,
            w.optimizer,
        )

    power = [r for r in (_power_rows(gpu) if power_rows is None else power_rows) if ours(r)]
    if power_rows is None:
        limits = power_limits(gpu)
    else:
        limits = sorted({float(r["power_limit"]) for r in power})
        if not limits:
            raise TraceError(
                f"the power trace has no rows of {workload} ({w.dataset}, {w.network})"
            )
    if power_limit is not None and power_limit not in limits:
        raise TraceError(
            f"the {gpu} trace has no power limit {power_limit:g} W; it has "
            + ", ".join(f"{limit:g}" for limit in limits)
        )
    max_power = limits[-1] if power_limit is None else float(power_limit)
    at_max = {int(r["batch_size"]): r for r in power if float(r["power_limit"]) == max_power}
    runs: dict[int, list[float]] = {}
    run_ids: dict[int, list[str]] = {}
    curves: dict[tuple[int, str], list[tuple[int, float]]] = {}
    thresholds: set[float] = set()
    for r in _train_rows():
        if not ours(r):
            continue
        size, metric, epoch = int(r["batch_size"]), float(r["target_metric"]), r["target_epoch"]
        thresholds.add(metric)
        if math.isclose(metric, w.target_metric):
            runs.setdefault(size, []).append(float(epoch))
            run_ids.setdefault(size, []).append(r["run"])
        if not math.isnan(float(epoch)):
            curves.setdefault((size, r["run"]), []).append((int(float(epoch)), metric))
    ordered = sorted(thresholds, reverse=not w.higher_is_better)  # worst first
    step = ordered[1] - ordered[0] if len(ordered) > 1 else 0.0
    profiles = {
        b: BatchSizeProfile(
            batch_size=b,
            time_per_epoch=float(at_max[b]["time_per_epoch"]),
            average_power=float(at_max[b]["average_power"]),
            target_epochs=tuple(runs[b]),
            curves=tuple(tuple(sorted(curves.get((b, run), []))) for run in run_ids[b]),
            start_metric=ordered[0] - step,
        )
        for b in sorted(set(at_max) & set(runs))
    }
    paces = {
        b: tuple(
            sorted(
                (
                    Pace(
                        float(r["power_limit"]),
                        float(r["time_per_epoch"]),
                        float(r["average_power"]),
                    )
                    for r in power
                    if int(r["batch_size"]) == b and float(r["power_limit"]) <= max_power
                ),
                key=lambda pace: pace.power_limit,
            )
        )
        for b in profiles
    }
    # The largest batch size the GPU's trace has caps the default (as in the paper).
    default = max((b for b in profiles if b <= w.default_batch_size), default=min(profiles))
    return TraceJob(w, gpu, max_power, default, profiles, paces)
