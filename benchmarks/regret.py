"""Regret of the policy on the NSDI'23 trace: six workloads x seeds x recurrences, per GPU.

For every workload it simulates the recurrences with the policy's defaults in-process and through
a real ``zeus-bso-server`` (they must agree), and in-process with upstream Zeus 0.16's options,
then compares cumulative cost with the oracle's and with always using the default batch size.

Held out (``--held-out``): the same workloads at every lower power limit the traces measured,
each a slower GPU whose maximum power is that limit, which the policy's defaults were not tuned
on: ours and the upstream preset, in-process.

The transfer scenario (hardware profiles): one job runs ``recurrences`` recurrences on the first
GPU, is registered again on the second and runs as many there (the batch sizes both GPUs have in
the trace, the first GPU's default); its regret over the second phase, against the second GPU's
oracle, stands beside a cold start on the second GPU with the same batch sizes and default.

Horizons (``--horizons``): the regret after 5, 10, 20 and 50 recurrences (a job re-configured
sooner is a new job), beside the floor, for the policy's defaults, with the per-run cap
``max_run_cost_ratio`` at 1.5 (and how far its runs went over the default's measured cost),
and with upstream's options, in-process; and jobs told how many times they run
(``expected_recurrences`` at each horizon), whose first seeds are replayed through a real server
too (unless ``--no-server``).

Loaded machine (``--loaded``): the early-stop references (``best_run``, the cheapest converged
run; ``best_mean``, the lowest mean of a batch size's converged runs) where each run's pace
spreads around the trace's (a loaded or shared machine), in-process.

Growing data (``--growing``): each recurrence's epochs cost a growth factor more than the last
one's (data that grows between daily re-trainings), with and without a ``window_size``, each
run's cost counted at the first recurrence's data, in-process.

Memory caps (``--memory-caps``): the same workloads on a GPU where every batch size from a
multiple of the default on runs out of memory at its first step (`zeus_bso.sim.simulate`'s
``memory_cap``), against the oracle below the cap: what the out-of-memory path costs (starts
at sizes that did not fit: at most one per size) and the regret that is left.

    .venv/bin/python benchmarks/regret.py [--gpus v100 p100] [--seeds 0 1 ... 19] [--recurrences 50]
                                          [--no-server] [--no-transfer | --transfer-only]
                                          [--held-out | --horizons | --loaded | --growing
                                           | --memory-caps | --power-limits
                                           | --power-slowdowns]

Writes benchmarks/results/regret_<gpu>.json and .md, and regret_transfer.json and .md (or, with
--held-out, regret_heldout.json and .md only; with --memory-caps, regret_memory.json and .md
only; with --power-limits, regret_power.json and .md only; with --power-slowdowns,
regret_power_slowdown.json and .md only; with --horizons, regret_horizons.json and .md only;
with --loaded, regret_loaded.json and .md only; with --growing, regret_growing.json and .md
only), and prints the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _server import running_server
from zeus_bso.client import ServerClient
from zeus_bso.sim import WORKLOADS, ServerBackend, in_process, job_spec, load_trace_job, simulate
from zeus_bso.sim.report import (
    HORIZONS,
    Summary,
    causes_markdown,
    horizon_markdown,
    judged_markdown,
    seed_result,
    summarize,
)
from zeus_bso.sim.trace import TraceJob, power_limits
from zeus_bso.spec import UPSTREAM_OPTIONS, GpuConfig

RESULTS = Path(__file__).parent / "results"
ETA = 0.5

# Upstream Zeus 0.16's server on this simulation model, V100, seeds 0-4, 50 recurrences.
PUBLISHED_UPSTREAM_V100 = {
    "cifar100": (1.202, 0.425),
    "imagenet": (1.085, -0.059),
    "squad": (1.031, 0.033),
    "librispeech": (1.152, 0.158),
    "movielens-1m": (1.384, 0.494),
    "sentiment140": (1.038, -0.010),
}


def save(name: str, text: str, data: Any) -> None:
    """Write ``text`` to ``results/<name>.md`` and ``data`` to ``<name>.json``, and print
    ``text``."""
    (RESULTS / f"{name}.md").write_text(text)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(text)


def run_all(
    gpu: str,
    seeds: list[int],
    recurrences: int,
    options: dict[str, Any],
    server: str | None,
    power_limit: float | None = None,
    cap_factor: int | None = None,
    accumulate: bool = False,
    eta: float = ETA,
    power_limits: bool = False,
    max_slowdown: float | None = None,
    pace_noise: float = 0.0,
    growth: float = 0.0,
) -> list[Summary]:
    summaries = []
    if eta != ETA:
        options = {**options, "eta_knob": eta}
    if max_slowdown is not None:
        options = {**options, "power_max_slowdown": max_slowdown}
    for name in WORKLOADS:
        trace = load_trace_job(name, gpu, power_limit)
        trace = dataclasses.replace(trace, max_slowdown=max_slowdown)
        cap = None if cap_factor is None else cap_factor * trace.default_batch_size
        results = []
        for seed in seeds:
            spec = job_spec(trace, f"regret-{name}-{gpu}-{seed}", mab_seed=seed, **options)
            if server is None:
                backend: Any = in_process(spec)
                recs = simulate(
                    trace,
                    backend,
                    recurrences=recurrences,
                    seed=seed,
                    eta_knob=eta,
                    memory_cap=cap,
                    accumulate=accumulate,
                    power_limits=power_limits,
                    pace_noise=pace_noise,
                    growth=growth,
                )
            else:
                with ServerClient(server) as client:
                    backend = ServerBackend(client, spec)
                    recs = simulate(
                        trace, backend, recurrences=recurrences, seed=seed, eta_knob=ETA
                    )
                    client.delete_job(backend.job_id)
            results.append(seed_result(seed, recs))
        summaries.append(summarize(trace, eta, recurrences, results, cap, accumulate, power_limits))
    return summaries


POWER_ETAS = (0.0, 0.5, 1.0)
"""The cost knobs of ``--power-limits``: time only, the default, energy only."""


def run_power_limits(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """Per GPU and eta: regret of today's policy, of the same policy with each batch size's
    first run profiling the power limits, its floor, and of the joint oracle, all against the
    batch-size-only oracle at the maximum power. Writes regret_power.json and .md."""
    lines = [
        f"Power limits: seeds {seeds}, {recurrences} recurrences, beta 2.0, in-process. "
        "Cumulative cost / the batch-size-only oracle's at the GPU's maximum power. Profiling: "
        "each batch size's first run pays its first epoch at the mean over the power limits it "
        "profiles (the trace's, from the highest down, until three in a row cost more than the "
        "cheapest) and trains at the cheapest of them after (never at eta 0); the joint oracle "
        "runs the best batch size at its best limit every recurrence. Floor: a policy that must "
        "start at the default but knows the rest (the default's first run profiles, then the "
        "cheapest batch size at its chosen limit, whose first run profiles too; "
        "`TraceJob.power_floor`): no policy that learns the job beats it in expectation.",
        "",
        "| GPU | eta | workload | today | with profiling | floor | joint oracle |",
        "|---|---|---|---|---|---|---|",
    ]
    data: dict[str, Any] = {}
    for gpu in gpus:
        for eta in POWER_ETAS:
            today = run_all(gpu, seeds, recurrences, {}, None, eta=eta)
            profiled = run_all(gpu, seeds, recurrences, {}, None, eta=eta, power_limits=True)
            data[f"{gpu}-eta{eta:g}"] = {
                "today": [s.to_dict() for s in today],
                "power_limits": [s.to_dict() for s in profiled],
            }
            rows = []
            for before, after in zip(today, profiled, strict=True):
                joint = after.joint_oracle_regret or math.nan
                rows.append((before.regret, after.regret, after.floor, joint))
                lines.append(
                    f"| {gpu.upper()} | {eta:g} | {after.workload} | {before.regret:.3f} "
                    f"| {after.regret:.3f} | {after.floor:.3f} | {joint:.3f} |"
                )
            means = [statistics.fmean(column) for column in zip(*rows, strict=True)]
            lines.append(
                f"| {gpu.upper()} | {eta:g} | **mean** | {means[0]:.3f} | **{means[1]:.3f}** "
                f"| {means[2]:.3f} | {means[3]:.3f} |"
            )
    text = "\n".join(lines) + "\n"
    save("regret_power", text, data)


SLOWDOWNS = (None, 1.1, 1.05)
"""The bounds of ``--power-slowdowns`` (``power_max_slowdown``; None: none)."""


def run_power_slowdowns(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """Per GPU, at eta 1 (energy alone, where lower limits pay most and slow most): the policy
    with power-limit profiling, its floor and the joint oracle, without a bound on the slowdown
    and with each of `SLOWDOWNS`, against the batch-size-only oracle at the maximum power.
    Writes regret_power_slowdown.json and .md."""
    lines = [
        f"Power limits with a bound on the slowdown (`power_max_slowdown`): seeds {seeds}, "
        f"{recurrences} recurrences, eta 1, in-process, the six workloads' mean. Cumulative cost "
        "/ the batch-size-only oracle's at the GPU's maximum power; profiling as in "
        "regret_power.md. A bound keeps the limits whose epoch takes at most that many times the "
        "epoch at the highest limit; the floor and the joint oracle obey it too.",
        "",
        "| GPU | power_max_slowdown | with profiling | floor | joint oracle |",
        "|---|---|---|---|---|",
    ]
    data: dict[str, Any] = {}
    for gpu in gpus:
        for bound in SLOWDOWNS:
            runs = run_all(gpu, seeds, recurrences, {}, None, eta=1.0, power_limits=True,
                           max_slowdown=bound)  # fmt: skip
            data[f"{gpu}-{bound}"] = [s.to_dict() for s in runs]
            means = [
                statistics.fmean(s.regret for s in runs),
                statistics.fmean(s.floor for s in runs),
                statistics.fmean(s.joint_oracle_regret or math.nan for s in runs),
            ]
            lines.append(
                f"| {gpu.upper()} | {'none' if bound is None else f'{bound:g}'} "
                f"| **{means[0]:.3f}** | {means[1]:.3f} | {means[2]:.3f} |"
            )
    text = "\n".join(lines) + "\n"
    save("regret_power_slowdown", text, data)


CAP_FACTORS = (2, 4)
"""The memory caps of ``--memory-caps``: every batch size from this multiple of the default on
runs out of memory."""


def run_memory_caps(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """Per GPU and cap: regret against the oracle below the cap, and the starts that ran out of
    memory. Writes regret_memory.json and .md."""
    lines = [
        f"Memory caps: seeds {seeds}, {recurrences} recurrences, eta 0.5, beta 2.0, in-process. "
        "Every batch size from the cap on runs out of memory at its first step; regret against "
        "the oracle below the cap; accumulating: runs accumulate gradients, so sizes from the "
        "cap on train in micro-batches below it at the micro-batch's pace, and the oracle may be "
        "one of them. Starts: runs (or micro-batches) that ran out of memory, per seed (mean; "
        "most at one size over every seed).",
        "",
        "| GPU | workload | default | cap | accumulating | oracle | regret | floor "
        "| OOM starts a seed | most at one size |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    data: dict[str, Any] = {}
    for gpu in gpus:
        for factor in CAP_FACTORS:
            for accumulate in (False, True):
                summaries = run_all(
                    gpu, seeds, recurrences, {}, None, cap_factor=factor, accumulate=accumulate
                )
                key = f"{gpu}-{factor}x" + ("-accumulating" if accumulate else "")
                data[key] = [s.to_dict() for s in summaries]
                for s in summaries:
                    starts = s.out_of_memory_starts()
                    most = max((n for seed in starts for n in seed.values()), default=0)
                    mean = statistics.fmean(sum(seed.values()) for seed in starts)
                    lines.append(
                        f"| {gpu.upper()} | {s.workload} | {s.default_batch_size} "
                        f"| {s.memory_cap} ({factor}x) | {'yes' if accumulate else 'no'} "
                        f"| {s.oracle_batch_size} | {s.regret:.3f} | {s.floor:.3f} "
                        f"| {mean:.1f} | {most} |"
                    )
    text = "\n".join(lines) + "\n"
    save("regret_memory", text, data)


def _shared(trace: TraceJob, sizes: set[int], default: int) -> TraceJob:
    """``trace`` with only ``sizes`` and ``default`` as its default batch size."""
    profiles = {b: p for b, p in trace.profiles.items() if b in sizes}
    return dataclasses.replace(trace, profiles=profiles, default_batch_size=default)


SKEW = 0.5
"""The skewed GPU's time per epoch of batch size b is its own times (largest / b) ** SKEW, or
for the one skewed down (b / smallest) ** SKEW."""


def skewed(trace: TraceJob, down: bool = False) -> TraceJob:
    """``trace`` on a GPU where smaller batch sizes are relatively slower (time per epoch times
    (largest / b) ** `SKEW`): the oracle moves to larger batch sizes, so the costs converted from
    the first GPU rank the batch sizes wrongly. ``down``: larger batch sizes are relatively
    slower ((b / smallest) ** `SKEW`), and the oracle moves to smaller ones."""
    largest, smallest = max(trace.profiles), min(trace.profiles)

    def factor(b: int) -> float:
        return float((b / smallest) ** SKEW if down else (largest / b) ** SKEW)

    profiles = {
        b: dataclasses.replace(p, time_per_epoch=p.time_per_epoch * factor(b))
        for b, p in trace.profiles.items()
    }
    suffix = "-skewed-down" if down else "-skewed"
    return dataclasses.replace(trace, profiles=profiles, gpu=f"{trace.gpu}{suffix}")


def run_transfer(
    first: str, second: str, seeds: list[int], recurrences: int
) -> list[tuple[list[int], Summary, Summary]]:
    """Per workload: the batch sizes both GPUs have, the second phase of a job that moved from
    ``first`` to ``second`` (``<gpu>-skewed`` and ``<gpu>-skewed-down``: `skewed`), and a cold
    start on ``second``, both against its oracle."""
    pairs = []
    for name in WORKLOADS:
        before = load_trace_job(name, first)
        if "-skewed" in second:
            gpu, _, how = second.partition("-skewed")
            after = skewed(load_trace_job(name, gpu), down=how == "-down")
        else:
            after = load_trace_job(name, second)
        sizes = set(before.batch_sizes) & set(after.batch_sizes)
        default = max((b for b in sizes if b <= before.default_batch_size), default=min(sizes))
        before, after = _shared(before, sizes, default), _shared(after, sizes, default)
        moved, cold = [], []
        for seed in seeds:
            spec = job_spec(before, f"transfer-{name}-{seed}", mab_seed=seed)
            job = in_process(spec)
            simulate(before, job, recurrences=recurrences, seed=seed, eta_knob=ETA)
            job.register(GpuConfig(max_power=after.max_power, number_of_gpus=1, gpu_model=second))
            later = 10_000 + seed  # the second phase's runs: the same for both
            recs = simulate(after, job, recurrences=recurrences, seed=later, eta_knob=ETA)
            moved.append(seed_result(seed, recs))
            fresh = in_process(job_spec(after, f"cold-{name}-{seed}", mab_seed=seed))
            recs = simulate(after, fresh, recurrences=recurrences, seed=later, eta_knob=ETA)
            cold.append(seed_result(seed, recs))
        pairs.append(
            (
                sorted(sizes),
                summarize(after, ETA, recurrences, moved),
                summarize(after, ETA, recurrences, cold),
            )
        )
    return pairs


HORIZON_POLICIES = {
    "ours": {},
    "ours, max_run_cost_ratio 1.5": {"max_run_cost_ratio": 1.5},
    "upstream options": UPSTREAM_OPTIONS,
}
"""The policies ``--horizons`` compares."""


def run_horizons(gpus: list[str], seeds: list[int], recurrences: int, served: bool) -> None:
    """Regret at `HORIZONS` for each of `HORIZON_POLICIES`, per GPU."""
    started = time.perf_counter()
    sections, data = [], []
    for gpu in gpus:
        for name, options in HORIZON_POLICIES.items():
            summaries = run_all(gpu, seeds, recurrences, options, None)
            ratios = [r for s in summaries for r in s.over_the_default()]
            over = sum(r > 1.5 for r in ratios)
            sections.append(
                f"### {gpu.upper()}, {name}\n\nRuns at other sizes above 1.5x the default's"
                f" measured cost: {over} of {len(ratios)} (the dearest: {max(ratios):.2f}x)."
                f"\n\n{horizon_markdown(summaries)}"
            )
            data.append(
                {
                    "gpu": gpu,
                    "policy": name,
                    "options": options,
                    "runs_over_1.5x_default": over,
                    "runs_after_the_default": len(ratios),
                    "dearest_run_over_default": max(ratios),
                    "horizons": {
                        str(h): {
                            s.workload: {
                                "regret": (a := s.at(h)).regret,
                                "floor": a.floor,
                                "savings": a.savings,
                            }
                            for s in summaries
                        }
                        for h in HORIZONS
                        if h <= recurrences
                    },
                }
            )
        sections.append(short_lived(gpu, seeds, recurrences, data, served))
    note = (
        f"Horizons: seeds {seeds}, eta 0.5, in-process; each cell is the regret after that many "
        "recurrences / the floor (running the default once, then the oracle); 'worst vs "
        "default': the dearest workload against always running its default batch size "
        "(positive: dearer).\n\n"
    )
    save("regret_horizons", note + "\n".join(sections), data)
    print(f"({time.perf_counter() - started:.0f} s)\n")


REPLAYED_SEEDS = 5
"""The seeds of each horizon's short-lived jobs replayed through a real server (`short_lived`)."""


def short_lived(
    gpu: str, seeds: list[int], recurrences: int, data: list[Any], served: bool = True
) -> str:
    """The section of jobs that say how many times they run: each horizon simulated on its own,
    with ``expected_recurrences`` set to it (a job of 5 runs knows it runs 5 times). With
    ``served``, the first `REPLAYED_SEEDS` seeds of each horizon are replayed through a real
    server, which must decide as the policy in-process does, to the cost of every run."""
    judged = {
        h: run_all(gpu, seeds, h, {"expected_recurrences": h}, None)
        for h in HORIZONS
        if h <= recurrences
    }
    replayed = ""
    if served:
        replay = seeds[:REPLAYED_SEEDS]
        with (
            tempfile.TemporaryDirectory() as tmp,
            running_server(f"sqlite:///{Path(tmp) / 'r.db'}") as url,
        ):
            for h, summaries in judged.items():
                through = run_all(gpu, replay, h, {"expected_recurrences": h}, url)
                for a, b in zip(summaries, through, strict=True):
                    if [x.costs for x in a.seeds[: len(replay)]] != [x.costs for x in b.seeds]:
                        raise SystemExit(f"{a.workload} at {h}: in-process and server differ")
        replayed = (
            f" Seeds {replay} of each horizon replayed through a real server: the same runs, to"
            " the cost of every one."
        )
    data.append(
        {
            "gpu": gpu,
            "policy": "ours, expected_recurrences = the horizon",
            "options": {"expected_recurrences": "the horizon"},
            "horizons": {
                str(h): {
                    s.workload: {"regret": s.regret, "floor": s.floor, "savings": s.savings}
                    for s in summaries
                }
                for h, summaries in judged.items()
            },
        }
    )
    return (
        f"### {gpu.upper()}, ours, expected_recurrences = the horizon\n\nEach horizon simulated "
        f"on its own, the job told how many times it runs.{replayed}\n\n"
        f"{judged_markdown(judged)}"
    )


LOADED_NOISE = (0.0, 0.1, 0.2, 0.3)
"""The spreads of a run's pace ``--loaded`` simulates (lognormal sigma, `simulate`'s
``pace_noise``)."""


def stopped_at_a_converging_size(summary: Summary) -> int:
    """Runs stopped on their cost (not converged, fewer epochs than ``max_epochs``) at a batch
    size that had converged before in their seed: the symptom of a reference set by one lucky
    run."""
    assert summary.trace is not None
    most, count = summary.trace.workload.max_epochs, 0
    for seed in summary.seeds:
        converged: set[int] = set()
        for trials in seed.trials:
            for trial in trials:
                stopped = not trial.converged and not trial.out_of_memory
                count += stopped and trial.batch_size in converged and trial.epochs < most
                if trial.converged:
                    converged.add(trial.batch_size)
    return count


def run_loaded(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """``early_stop_reference`` on a loaded machine: each run's pace spread by `LOADED_NOISE`."""
    started = time.perf_counter()
    lines = [
        "| GPU | pace spread | reference | at 10 | at 50 | worst vs default at 50"
        " | cost stops at sizes that converged before |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    data = []
    for gpu in gpus:
        for noise in LOADED_NOISE:
            for reference in ("best_run", "best_mean"):
                options = {"early_stop_reference": reference}
                summaries = run_all(gpu, seeds, recurrences, options, None, pace_noise=noise)
                at10 = statistics.fmean(s.at(min(10, recurrences)).regret for s in summaries)
                mean = statistics.fmean(s.regret for s in summaries)
                worst = max(-s.savings for s in summaries)
                stops = sum(stopped_at_a_converging_size(s) for s in summaries)
                lines.append(
                    f"| {gpu.upper()} | {noise:g} | {reference} | {at10:.3f} | {mean:.3f}"
                    f" | {worst * 100:+.1f}% | {stops} |"
                )
                data.append(
                    {
                        "gpu": gpu,
                        "pace_noise": noise,
                        "early_stop_reference": reference,
                        "regret_at_10": at10,
                        "regret": mean,
                        "worst_vs_default": worst,
                        "cost_stops_at_converging_sizes": stops,
                        "per_workload": {s.workload: s.regret for s in summaries},
                    }
                )
    note = (
        f"Loaded machine: seeds {seeds}, {recurrences} recurrences, eta 0.5, in-process; each "
        "run's epochs take exp(N(0, spread)) times the trace's (`simulate`'s pace_noise), so one "
        "lucky run can sit far below its batch size's others. 'cost stops at sizes that "
        "converged before': runs stopped on their cost at a batch size that had converged "
        "earlier in their seed, summed over seeds and workloads.\n\n"
    )
    save("regret_loaded", note + "\n".join(lines) + "\n", data)
    print(f"({time.perf_counter() - started:.0f} s)\n")


GROWTH = (0.0, 0.005, 0.01, 0.03)
"""How much the data grows a recurrence in ``--growing`` (`simulate`'s ``growth``)."""
GROWING_WINDOWS = (0, 10)
"""The ``window_size`` values ``--growing`` compares (0: every run counts)."""


def run_growing(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """Data that grows between recurrences (a daily re-training's): regret of the decisions."""
    started = time.perf_counter()
    lines = [
        "| GPU | growth a recurrence | window_size | at 10 | at 50 | worst workload at 50 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    data = []
    for gpu in gpus:
        for growth in GROWTH:
            for window in GROWING_WINDOWS:
                options = {"window_size": window} if window else {}
                summaries = run_all(gpu, seeds, recurrences, options, None, growth=growth)
                at10 = statistics.fmean(s.at(min(10, recurrences)).regret for s in summaries)
                mean = statistics.fmean(s.regret for s in summaries)
                worst = max(summaries, key=lambda s: s.regret)
                lines.append(
                    f"| {gpu.upper()} | {growth * 100:g}% | {window} | {at10:.3f} | {mean:.3f}"
                    f" | {worst.workload} {worst.regret:.3f} |"
                )
                data.append(
                    {
                        "gpu": gpu,
                        "growth": growth,
                        "window_size": window,
                        "regret_at_10": at10,
                        "regret": mean,
                        "per_workload": {s.workload: s.regret for s in summaries},
                    }
                )
    note = (
        f"Growing data: seeds {seeds}, {recurrences} recurrences, eta 0.5, in-process; "
        "recurrence t's epochs take (1 + growth)^t times the trace's (time and energy, as the "
        "server is told), and each run's cost is counted at the first recurrence's data (divided "
        "by that factor), so the regret against the oracle is the decisions' alone.\n\n"
    )
    save("regret_growing", note + "\n".join(lines) + "\n", data)
    print(f"({time.perf_counter() - started:.0f} s)\n")


def run_held_out(gpus: list[str], seeds: list[int], recurrences: int) -> None:
    """Ours and the upstream preset at every power limit below each GPU's highest."""
    started = time.perf_counter()
    lines = [
        "| GPU | power limit (W) | oracle bs | ours | upstream options | ours worst vs default"
        " | workloads where ours >= upstream |",
        "|---|---|---|---|---|---|---|",
    ]
    data = []
    for gpu in gpus:
        for limit in power_limits(gpu)[:-1]:
            ours = run_all(gpu, seeds, recurrences, {}, None, limit)
            upstream = run_all(gpu, seeds, recurrences, UPSTREAM_OPTIONS, None, limit)
            worst = max(-s.savings for s in ours)
            pairs = zip(ours, upstream, strict=True)
            behind = [o.workload for o, u in pairs if o.regret >= u.regret]
            oracles = ", ".join(str(s.oracle_batch_size) for s in ours)
            lines.append(
                f"| {gpu.upper()} | {limit:g} | {oracles}"
                f" | {statistics.fmean(s.regret for s in ours):.3f}"
                f" | {statistics.fmean(s.regret for s in upstream):.3f}"
                f" | {worst * 100:+.1f}% | {', '.join(behind) or 'none'} |"
            )
            data.append(
                {
                    "gpu": gpu,
                    "power_limit": limit,
                    "ours": [s.to_dict() for s in ours],
                    "upstream_options": [s.to_dict() for s in upstream],
                }
            )
    note = (
        f"Held out: seeds {seeds}, {recurrences} recurrences, eta 0.5, beta 2.0, in-process; each "
        "row is the six workloads at a lower power limit of the trace, a slower GPU whose maximum "
        "power is that limit (oracle batch sizes in workload order: "
        + ", ".join(WORKLOADS)
        + "). 'worst vs default': the highest cumulative cost of a workload against always using "
        "its default batch size.\n\n"
    )
    text = note + "\n".join(lines) + "\n"
    save("regret_heldout", text, data)
    print(f"({time.perf_counter() - started:.0f} s)\n")


def transfer_markdown(pairs: list[tuple[list[int], Summary, Summary]]) -> str:
    lines = [
        "| workload | batch sizes | default bs | oracle bs | moved | cold start |",
        "|---|---|---|---|---|---|",
    ]
    for sizes, moved, cold in pairs:
        lines.append(
            f"| {moved.workload} | {', '.join(map(str, sizes))}"
            f" | {moved.default_batch_size} | {moved.oracle_batch_size}"
            f" | {moved.regret:.3f} | {cold.regret:.3f} |"
        )
    mean_moved = statistics.fmean(m.regret for _, m, _ in pairs)
    mean_cold = statistics.fmean(c.regret for _, _, c in pairs)
    lines.append(f"| **mean** | | | | **{mean_moved:.3f}** | {mean_cold:.3f} |")
    return "\n".join(lines) + "\n"


def markdown(
    gpu: str,
    ours: list[Summary],
    served: list[Summary] | None,
    upstream: list[Summary],
    curves: list[Summary],
) -> str:
    published = gpu == "v100"
    header = "| workload | default bs | oracle bs | ours | ours via server | no curve stop"
    header += " | upstream options"
    header += " | published upstream |" if published else " |"
    header += " ours vs default | upstream vs default |"
    columns = header.count("|") - 1
    lines = [header, "|" + "---|" * columns]
    for i, s in enumerate(ours):
        via = f"{served[i].regret:.3f}" if served else "n/a"
        row = f"| {s.workload} | {s.default_batch_size} | {s.oracle_batch_size}"
        row += f" | {s.regret:.3f} | {via} | {curves[i].regret:.3f}"
        row += f" | {upstream[i].regret:.3f}"
        if published:
            row += f" | {PUBLISHED_UPSTREAM_V100[s.workload][0]:.3f}"
        row += f" | {-s.savings * 100:+.1f}% | {-upstream[i].savings * 100:+.1f}% |"
        lines.append(row)
    mean = statistics.fmean(s.regret for s in ours)
    mean_served = f"{statistics.fmean(s.regret for s in served):.3f}" if served else "n/a"
    mean_upstream = statistics.fmean(s.regret for s in upstream)
    mean_curves = statistics.fmean(s.regret for s in curves)
    row = f"| **mean** | | | **{mean:.3f}** | {mean_served} | {mean_curves:.3f}"
    row += f" | {mean_upstream:.3f}"
    if published:
        row += f" | {statistics.fmean(v[0] for v in PUBLISHED_UPSTREAM_V100.values()):.3f}"
    row += " | | |"
    lines.append(row)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", nargs="+", default=["v100", "p100"])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(20)))
    parser.add_argument("--recurrences", type=int, default=50)
    parser.add_argument("--no-server", action="store_true", help="skip the run through a server")
    parser.add_argument("--no-transfer", action="store_true", help="skip the transfer scenario")
    parser.add_argument("--transfer-only", action="store_true", help="only the transfer scenario")
    parser.add_argument(
        "--held-out", action="store_true", help="only the lower power limits, held out"
    )
    parser.add_argument("--memory-caps", action="store_true", help="only the GPUs with memory caps")
    parser.add_argument(
        "--horizons", action="store_true", help="only the regret at 5, 10, 20, 50 recurrences"
    )
    parser.add_argument(
        "--loaded", action="store_true", help="only the early-stop references on a loaded machine"
    )
    parser.add_argument(
        "--growing", action="store_true", help="only data that grows between recurrences"
    )
    parser.add_argument("--power-limits", action="store_true", help="only power-limit profiling")
    parser.add_argument(
        "--power-slowdowns", action="store_true", help="only power limits with slowdown bounds"
    )
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    if args.power_limits:
        run_power_limits(args.gpus, args.seeds, args.recurrences)
        return
    if args.power_slowdowns:
        run_power_slowdowns(args.gpus, args.seeds, args.recurrences)
        return
    if args.memory_caps:
        run_memory_caps(args.gpus, args.seeds, args.recurrences)
        return
    if args.held_out:
        run_held_out(args.gpus, args.seeds, args.recurrences)
        return
    if args.horizons:
        run_horizons(args.gpus, args.seeds, args.recurrences, not args.no_server)
        return
    if args.loaded:
        run_loaded(args.gpus, args.seeds, args.recurrences)
        return
    if args.growing:
        run_growing(args.gpus, args.seeds, args.recurrences)
        return

    if not args.no_transfer and len(args.gpus) >= 2:
        started = time.perf_counter()
        first, second = args.gpus[:2]
        sections, data = [], {}
        scenarios = [(first, second), (second, first)]
        scenarios += [(first, f"{first}-skewed"), (first, f"{first}-skewed-down")]
        for a, b in scenarios:
            pairs = run_transfer(a, b, args.seeds, args.recurrences)
            sections.append(f"### {a.upper()} then {b.upper()}\n\n" + transfer_markdown(pairs))
            data[f"{a}->{b}"] = [
                {"batch_sizes": sizes, "moved": m.to_dict(), "cold": c.to_dict()}
                for sizes, m, c in pairs
            ]
        note = (
            f"Transfer: seeds {args.seeds}, {args.recurrences} recurrences on one GPU, then as "
            "many on the other with the same job (registered again), eta 0.5, beta 2.0. Regret "
            "over the second phase = its cumulative cost / the second GPU's oracle's; cold "
            "start: a new job on the second GPU with the same batch sizes and default. "
            f"{first.upper()}-SKEWED: {first.upper()} with the time per epoch of batch size b "
            f"times (largest / b) ** {SKEW}, a GPU change that moves the oracle to larger batch "
            f"sizes; {first.upper()}-SKEWED-DOWN: times (b / smallest) ** {SKEW}, one that moves "
            "it to smaller ones.\n\n"
        )
        text = note + "\n".join(sections)
        save("regret_transfer", text, data)
        print(f"({time.perf_counter() - started:.0f} s)\n")

    for gpu in [] if args.transfer_only else args.gpus:
        started = time.perf_counter()
        ours = run_all(gpu, args.seeds, args.recurrences, {}, None)
        upstream = run_all(gpu, args.seeds, args.recurrences, UPSTREAM_OPTIONS, None)
        curves = run_all(gpu, args.seeds, args.recurrences, {"learning_curve_stop": False}, None)
        served = None
        if not args.no_server:
            with (
                tempfile.TemporaryDirectory() as tmp,
                running_server(f"sqlite:///{Path(tmp) / 'r.db'}") as url,
            ):
                served = run_all(gpu, args.seeds, args.recurrences, {}, url)
            for a, b in zip(ours, served, strict=True):
                if [s.costs for s in a.seeds] != [s.costs for s in b.seeds]:
                    raise SystemExit(f"{a.workload}: in-process and server results differ")
        table = markdown(gpu, ours, served, upstream, curves)
        table += (
            "\nWhere our regret goes: points of excess cost (% of the oracle's cumulative "
            "cost) by cause, mean over seeds (`zeus_bso.sim.report.CAUSES`); floor: the regret "
            "of running the default once, then the oracle.\n\n" + causes_markdown(ours)
        )
        note = (
            f"{gpu.upper()}, seeds {args.seeds}, {args.recurrences} recurrences, eta 0.5, "
            "beta 2.0. Regret = cumulative cost / oracle cumulative cost; "
            "'vs default' = cumulative cost against always using the default batch size "
            "(negative: cheaper). 'no curve stop': ours without learning_curve_stop, "
            "in-process.\n\n"
        )
        (RESULTS / f"regret_{gpu}.md").write_text(note + table)
        (RESULTS / f"regret_{gpu}.json").write_text(
            json.dumps(
                {
                    "gpu": gpu,
                    "seeds": args.seeds,
                    "recurrences": args.recurrences,
                    "ours": [s.to_dict() for s in ours],
                    "ours_via_server": [s.to_dict() for s in served] if served else None,
                    "upstream_options": [s.to_dict() for s in upstream],
                    "no_learning_curve_stop": [s.to_dict() for s in curves],
                    "published_upstream_v100": PUBLISHED_UPSTREAM_V100 if gpu == "v100" else None,
                },
                indent=1,
            )
            + "\n"
        )
        print(note + table)
        print(f"({time.perf_counter() - started:.0f} s)\n")


if __name__ == "__main__":
    main()
