"""Regret of jobs seeded from a related job's curve (priors), on the NSDI'23 trace.

Each scenario seeds every new job of a workload with a parent's curve (`zeus_bso.sim.parents`)
and simulates its recurrences (six workloads x seeds); the regret after 5, 10, 20 and 50
recurrences stands beside the cold start's (no prior) and its floor (running the default once,
then the oracle: what no job without a prior can beat):

- trust mode, a declared parent: the same workload with its costs drawn around the truth
  (lognormal, sigma 0.1 and 0.2), with its optimum shifted by one size (up for odd seeds,
  down for even ones), and whose runs took a third of the epochs (the new job's target lies
  three times as far: a parent that learns alike, but whose epochs are no measure);
- check mode: the same workload at sigma 0.1, and the wrong prior: every other workload's curve
  (all 30 ordered pairs), where the worst pair is held against its own cold start;
- trust mode with the wrong prior (a misuse: trust is for a declared parent), all 30 pairs, for
  what the bounds on a run on the parent's word leave of it;
- a second table: the cold start, the declared parents and the wrong priors again, each horizon
  simulated on its own with ``expected_recurrences`` set to it (a job that knows how many times
  it runs);
- a third: the cold start and the declared parents with the per-run cap
  (``max_run_cost_ratio`` `CAP`), beside the runs that cost more than the cap times the
  default's measured cost;
- with ``--served``, a fourth: the declared parents and the wrong priors of the first
  `REPLAYED_SEEDS` seeds replayed through a real server, where each parent is a job that ran
  (`served`).

    .venv/bin/python benchmarks/regret_priors.py [--gpus v100 p100] [--seeds 0 ... 19]
                                                 [--recurrences 50] [--served]

Writes benchmarks/results/regret_priors.json and .md, and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _server import running_server
from zeus_bso.client import ServerClient
from zeus_bso.policy.types import Prior, PriorMode
from zeus_bso.sim import (
    WORKLOADS,
    ServerBackend,
    in_process,
    job_spec,
    load_trace_job,
    parent_job,
    simulate,
)
from zeus_bso.sim.parents import ParentCurve, parent_curve
from zeus_bso.sim.report import HORIZONS, Summary, seed_result, summarize
from zeus_bso.sim.trace import TraceJob

RESULTS = Path(__file__).parent / "results"
ETA = 0.5
CAP = 1.5
"""The per-run cap of the third table (``max_run_cost_ratio``)."""

DECLARED: dict[str, dict[str, Any]] = {
    "trust, same workload, sigma 0.1": {"sigma": 0.1, "mode": PriorMode.TRUST},
    "trust, same workload, sigma 0.2": {"sigma": 0.2, "mode": PriorMode.TRUST},
    "trust, optimum shifted by one size": {"shift": "one size", "mode": PriorMode.TRUST},
    "trust, a target three times as far": {"epochs_scale": 1 / 3, "mode": PriorMode.TRUST},
    "check, same workload, sigma 0.1": {"sigma": 0.1, "mode": PriorMode.CHECK},
}
"""The declared parents: the same workload, its curve perturbed (`zeus_bso.sim.parents`)."""

Seeding = Callable[[TraceJob, int], Prior | None]
"""The prior a scenario gives a new job of a workload, in a seed."""


def seeded(gpu: str, parent: str | None = None, **how: Any) -> Seeding:
    """A scenario's seeding: the workload's own curve (``parent`` None) or ``parent``'s."""
    curve = curve_of(gpu, parent, how)
    return lambda job, seed: curve(job, seed).prior(how.get("mode", PriorMode.CHECK))


def curve_of(
    gpu: str, parent: str | None, how: dict[str, Any]
) -> Callable[[TraceJob, int], ParentCurve]:
    """What a scenario's parent learned of a workload's sizes, in a seed."""
    other = load_trace_job(parent, gpu) if parent is not None else None

    def curve(job: TraceJob, seed: int) -> ParentCurve:
        shift = how.get("shift", 0)
        if shift == "one size":
            shift = 1 if seed % 2 else -1
        sigma, scale = how.get("sigma", 0.0), how.get("epochs_scale", 1.0)
        return parent_curve(
            job, other or job, eta_knob=ETA, seed=seed, sigma=sigma, shift=shift, epochs_scale=scale
        )

    return curve


def run(
    gpu: str, seeds: list[int], recurrences: int, seeding: Seeding | None, **options: Any
) -> list[Summary]:
    """Each workload's simulation, its new jobs seeded by ``seeding`` (None: cold) and
    registered with ``options``."""
    summaries = []
    for name in WORKLOADS:
        trace = load_trace_job(name, gpu)
        results = []
        for seed in seeds:
            prior = None if seeding is None else seeding(trace, seed)
            spec = job_spec(trace, f"prior-{name}-{seed}", mab_seed=seed, **options)
            backend = in_process(spec, prior)
            recs = simulate(trace, backend, recurrences=recurrences, seed=seed, eta_knob=ETA)
            results.append(seed_result(seed, recs))
        summaries.append(summarize(trace, ETA, recurrences, results))
    return summaries


def at(summaries: list[Summary], horizon: int) -> dict[str, Summary]:
    return {s.workload: s.at(horizon) for s in summaries}


def row(name: str, by_horizon: dict[int, list[float]], extra: str) -> str:
    cells = " | ".join(f"{statistics.fmean(by_horizon[h]):.3f}" for h in sorted(by_horizon))
    return f"| {name} | {cells} | {extra} |"


def scenario_data(summaries: list[Summary], horizons: list[int]) -> dict[str, Any]:
    return {
        str(h): {
            s.workload: {"regret": (a := s.at(h)).regret, "savings": a.savings} for s in summaries
        }
        for h in horizons
    }


def wrong_pairs(
    gpu: str,
    seeds: list[int],
    recurrences: int,
    horizons: list[int],
    cold_at: dict[int, dict[str, Summary]],
    mode: PriorMode,
) -> tuple[dict[int, list[float]], dict[int, tuple[float, str]], dict[str, Any]]:
    """Every ordered pair of workloads, each job seeded in ``mode`` from the other's curve: the
    regret of each pair by horizon, the worst pair's points above its own cold start, and each
    pair's regret by name."""
    pairs: dict[int, list[float]] = {h: [] for h in horizons}
    worst: dict[int, tuple[float, str]] = {h: (-1.0, "") for h in horizons}
    wrong: dict[str, Any] = {}
    for parent in WORKLOADS:
        summaries = run(gpu, seeds, recurrences, seeded(gpu, parent, mode=mode))
        for summary in summaries:
            if summary.workload == parent:
                continue
            pair = f"{summary.workload} from {parent}"
            wrong[pair] = {str(h): summary.at(h).regret for h in horizons}
            for h in horizons:
                regret = summary.at(h).regret
                pairs[h].append(regret)
                above = regret - cold_at[h][summary.workload].regret
                worst[h] = max(worst[h], (above, pair))
    return pairs, worst, wrong


def run_gpu(gpu: str, seeds: list[int], recurrences: int) -> tuple[str, dict[str, Any]]:
    horizons = [h for h in HORIZONS if h <= recurrences]
    cold = run(gpu, seeds, recurrences, None)
    cold_at = {h: at(cold, h) for h in horizons}
    header = "| scenario | " + " | ".join(f"{h} recurrences" for h in horizons)
    lines = [header + " | worst against the default at 5 |", "|---" * (len(horizons) + 2) + "|"]
    floors = {h: [s.floor for s in cold_at[h].values()] for h in horizons}
    lines.append(row("floor (cold: the default once, then the oracle)", floors, ""))
    data: dict[str, Any] = {"gpu": gpu, "scenarios": {}}

    def add(name: str, summaries: list[Summary]) -> None:
        regret = {h: [s.at(h).regret for s in summaries] for h in horizons}
        worst = max(-s.at(min(5, recurrences)).savings for s in summaries)
        lines.append(row(name, regret, f"{worst:+.1%}"))
        data["scenarios"][name] = scenario_data(summaries, horizons)

    add("cold start", cold)
    for name, how in DECLARED.items():
        add(name, run(gpu, seeds, recurrences, seeded(gpu, **how)))
    # The wrong prior: each other workload's curve, check mode; every pair against its cold.
    pairs, worst, wrong = wrong_pairs(gpu, seeds, recurrences, horizons, cold_at, PriorMode.CHECK)
    lines.append(row("check, another workload (30 pairs)", pairs, ""))
    data["scenarios"]["check, another workload"] = wrong
    # Trust mode with a wrong parent: a misuse (trust is for a declared parent), measured for
    # what its bounds leave of it.
    trusted, _, wrong = wrong_pairs(gpu, seeds, recurrences, horizons, cold_at, PriorMode.TRUST)
    lines.append(row("trust, another workload (30 pairs; a misuse)", trusted, ""))
    data["scenarios"]["trust, another workload"] = wrong
    worst_words = ", ".join(
        f"{h}: {100 * worst[h][0]:+.1f} points ({worst[h][1]})" for h in horizons
    )
    text = (
        f"### {gpu.upper()}\n\n" + "\n".join(lines) + "\n\nThe wrong prior's worst pair against "
        f"its own cold start, at each horizon: {worst_words}.\n"
    )
    data["wrong_prior_worst_points_above_cold"] = {
        str(h): {"points": 100 * worst[h][0], "pair": worst[h][1]} for h in horizons
    }
    text += short_lived(gpu, seeds, horizons, data)
    return text + capped(gpu, seeds, recurrences, horizons, data), data


def short_lived(
    gpu: str,
    seeds: list[int],
    horizons: list[int],
    data: dict[str, Any],
) -> str:
    """The table of jobs that also say how many times they run: each horizon simulated on its
    own with ``expected_recurrences`` set to it (`zeus_bso.policy.horizon`)."""
    header = "| scenario, expected_recurrences = the horizon | "
    header += " | ".join(f"{h} recurrences" for h in horizons)
    lines = [header + " | worst against the default at 5 |", "|---" * (len(horizons) + 2) + "|"]
    data["expected_recurrences"] = {}
    scenarios = [("cold start", None), *((n, seeded(gpu, **how)) for n, how in DECLARED.items())]
    cold: dict[int, dict[str, float]] = {}
    for name, seeding in scenarios:
        judged = {h: run(gpu, seeds, h, seeding, expected_recurrences=h) for h in horizons}
        if seeding is None:  # the cold start, which each wrong pair is held against
            cold = {h: {s.workload: s.regret for s in judged[h]} for h in horizons}
        worst = max(-s.savings for s in judged[horizons[0]])
        lines.append(
            row(name, {h: [s.regret for s in judged[h]] for h in horizons}, f"{worst:+.1%}")
        )
        data["expected_recurrences"][name] = {
            str(h): {s.workload: {"regret": s.regret, "savings": s.savings} for s in judged[h]}
            for h in horizons
        }
    # The wrong prior, each pair against its own cold start with the same setting.
    pairs: dict[int, list[float]] = {h: [] for h in horizons}
    worst_pair: dict[int, tuple[float, str]] = {h: (-1.0, "") for h in horizons}
    dearest = -1.0
    for parent in WORKLOADS:
        seeding = seeded(gpu, parent, mode=PriorMode.CHECK)
        for h in horizons:
            for summary in run(gpu, seeds, h, seeding, expected_recurrences=h):
                if summary.workload == parent:
                    continue
                pair = f"{summary.workload} from {parent}"
                pairs[h].append(summary.regret)
                above = summary.regret - cold[h][summary.workload]
                worst_pair[h] = max(worst_pair[h], (above, pair))
                if h == horizons[0]:
                    dearest = max(dearest, -summary.savings)
    lines.append(row("check, another workload (30 pairs)", pairs, f"{dearest:+.1%}"))
    data["expected_recurrences_wrong_prior_worst_points_above_cold"] = {
        str(h): {"points": 100 * worst_pair[h][0], "pair": worst_pair[h][1]} for h in horizons
    }
    words = ", ".join(
        f"{h}: {100 * worst_pair[h][0]:+.1f} points ({worst_pair[h][1]})" for h in horizons
    )
    return (
        "\n" + "\n".join(lines) + "\n\nWith expected_recurrences, the wrong prior's worst pair "
        f"against its own cold start (with the same setting), at each horizon: {words}.\n"
    )


def capped(
    gpu: str,
    seeds: list[int],
    recurrences: int,
    horizons: list[int],
    data: dict[str, Any],
) -> str:
    """The table of jobs with the per-run cap (``max_run_cost_ratio`` `CAP`), and how many of
    their runs at other sizes cost more than `CAP` times the default's measured cost (from the
    default's first converged run on: a run before it, as a trusted prior's best, has no
    reference to be held against)."""
    header = f"| scenario, max_run_cost_ratio {CAP} | "
    header += " | ".join(f"{h} recurrences" for h in horizons)
    lines = [
        header + f" | runs above {CAP}x the default (the dearest) |",
        "|---" * (len(horizons) + 2) + "|",
    ]
    data["capped"] = {}
    scenarios = [("cold start", None), *((n, seeded(gpu, **how)) for n, how in DECLARED.items())]
    for name, seeding in scenarios:
        summaries = run(gpu, seeds, recurrences, seeding, max_run_cost_ratio=CAP)
        ratios = [r for s in summaries for r in s.over_the_default()]
        over = sum(r > CAP for r in ratios)
        dearest = max(ratios, default=0.0)
        regret = {h: [s.at(h).regret for s in summaries] for h in horizons}
        lines.append(row(name, regret, f"{over} of {len(ratios)} ({dearest:.2f}x)"))
        data["capped"][name] = {
            **scenario_data(summaries, horizons),
            "runs_over_cap": over,
            "runs_after_the_default": len(ratios),
            "dearest_run_over_default": dearest,
        }
    return "\n" + "\n".join(lines) + "\n"


REPLAYED_SEEDS = 3
"""The seeds of each scenario replayed through a real server (`served`): 162 jobs a GPU, each
of up to 50 recurrences (the whole command with ``--served``: 27 minutes for both GPUs on two
cores)."""


def served(
    gpu: str,
    seeds: list[int],
    recurrences: int,
    data: dict[str, Any],
) -> str:
    """The priors replayed through a real server: each scenario's parent is a job on it that ran
    once at each size its curve knows (pinned there: `ParentCurve.runs`), and each new job
    registers with ``prior_from`` that job, so the server learns the prior from stored runs as
    it does for a user's. Each replay must decide as the policy in-process does with the prior
    those runs give (`ParentCurve.learned`), to the cost of every run; its regret stands beside
    the in-process tables' (the curve itself, with fractional epochs and noisy epoch costs)."""
    horizons = [h for h in HORIZONS if h <= recurrences]
    scenarios: list[tuple[str, str | None, dict[str, Any]]]
    scenarios = [(name, None, how) for name, how in DECLARED.items()]
    wrong = "check, another workload (30 pairs)"
    scenarios += [(wrong, p, {"mode": PriorMode.CHECK}) for p in WORKLOADS]
    regret: dict[str, dict[str, list[list[float]]]] = {}  # scenario -> served/in-process -> h
    replays = 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_server(f"sqlite:///{tmp}/p.db") as url,
        ServerClient(url) as client,
    ):
        for name, parent, how in scenarios:
            curve_at, mode = curve_of(gpu, parent, how), how["mode"]
            cells = regret.setdefault(name, {"served": [], "in-process": []})
            for workload in WORKLOADS:
                if workload == parent:
                    continue
                trace = load_trace_job(workload, gpu)
                through, ideal = [], []
                for seed in seeds:
                    curve = curve_at(trace, seed)
                    key = f"{gpu}-{parent or 'own'}-{workload}-{seed}-{len(regret)}"
                    prior_from = parent_job(client, trace, curve, f"parent-{key}", ETA)
                    options: dict[str, Any] = {"mab_seed": seed}
                    if prior_from is not None:
                        options.update(prior_from=prior_from, prior_mode=mode.value)
                    spec = job_spec(trace, f"served-{key}", **options)
                    backend = ServerBackend(client, spec)
                    recs = simulate(
                        trace, backend, recurrences=recurrences, seed=seed, eta_knob=ETA
                    )
                    local = job_spec(trace, f"local-{key}", mab_seed=seed)
                    learned = in_process(local, curve.learned(mode))
                    alike = simulate(
                        trace, learned, recurrences=recurrences, seed=seed, eta_knob=ETA
                    )
                    if [r.trials for r in recs] != [r.trials for r in alike]:
                        raise SystemExit(f"{name}, {workload}, seed {seed}: server differs")
                    replays += 1
                    through.append(seed_result(seed, recs))
                    own = in_process(local, curve.prior(mode))
                    kept = simulate(trace, own, recurrences=recurrences, seed=seed, eta_knob=ETA)
                    ideal.append(seed_result(seed, kept))
                for results, cell in ((through, "served"), (ideal, "in-process")):
                    summary = summarize(trace, ETA, recurrences, results)
                    cells[cell].append([summary.at(h).regret for h in horizons])
    header = "| scenario, seeds " + ", ".join(map(str, seeds)) + " | "
    header += " | ".join(f"{h} recurrences" for h in horizons) + " |"
    lines = [header, "|---" * (len(horizons) + 1) + "|"]
    data["served"] = {}
    for name, cells in regret.items():
        means = {
            cell: [statistics.fmean(row[i] for row in rows) for i in range(len(horizons))]
            for cell, rows in cells.items()
        }
        text = " | ".join(
            f"{a:.3f} ({100 * (a - b):+.1f})"
            for a, b in zip(means["served"], means["in-process"], strict=True)
        )
        lines.append(f"| {name} | {text} |")
        data["served"][name] = {
            cell: dict(zip(map(str, horizons), values, strict=True))
            for cell, values in means.items()
        }
    return (
        f"\nThrough a real server: each cell is the mean regret of the jobs replayed there, and in"
        " brackets its points above the same seeds in-process with the curve itself. Each of the"
        f" {replays} replays decided as the policy in-process does with the prior its parent's"
        " stored runs give, to the cost of every run.\n\n" + "\n".join(lines) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", nargs="+", default=["v100", "p100"])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(20)))
    parser.add_argument("--recurrences", type=int, default=50)
    parser.add_argument(
        "--served",
        action="store_true",
        help=f"also replay the first {REPLAYED_SEEDS} seeds of the trusted, checked and wrong "
        "priors through a real server, their parents jobs on it",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    sections, data = [], []
    for gpu in args.gpus:
        text, found = run_gpu(gpu, args.seeds, args.recurrences)
        if args.served:
            replay = args.seeds[:REPLAYED_SEEDS]
            text += served(gpu, replay, args.recurrences, found)
        print(text, flush=True)
        sections.append(text)
        data.append(found)
    note = (
        f"Priors: seeds {args.seeds}, eta 0.5, in-process; each cell is the mean regret over the "
        "six workloads after that many recurrences; 'worst against the default': the dearest "
        "workload against always running its default batch size (positive: dearer).\n\n"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "regret_priors.md").write_text(note + "\n".join(sections))
    (RESULTS / "regret_priors.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
