"""Request latency while replaying the paper's trace through a server, ours against upstream's.

The trace's recurrences (``zeus_bso.sim``: cifar100 and librispeech on the V100, seed 0, 50
recurrences each) are driven through a real server by one sequential keep-alive client, as
training runs use it: a dispatch, a report after every epoch, the trial's end. Ours (SQLite, one
worker) and upstream Zeus 0.16's (SQLite, one worker) each start fresh, in ``--pairs`` alternated
pairs (ours, then upstream's, and again), so that a slow minute of the machine weighs on both;
the ratios are medians over the pairs.

    .venv/bin/python benchmarks/trace_replay_latency.py \\
        --upstream-python .upstream/bin/python [--pairs 5]

(``.upstream``: an environment with ``zeus[bso-server]==0.16.0``, as the test command makes.)
Prints a table and writes benchmarks/results/trace_replay_latency.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _figures import commit, percentile
from _server import running_server, upstream_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zeus_bso.client import ServerClient
from zeus_bso.sim import ServerBackend, job_spec, load_trace_job, simulate
from zeus_bso.spec import ReportResponse, TrialId

RESULTS = Path(__file__).parent / "results"
WORKLOADS = ("cifar100", "librispeech")


class Timed(ServerBackend):
    """A `ServerBackend` that times each request, by route."""

    def __init__(self, client: ServerClient, job: Any, latencies: dict[str, list[float]]) -> None:
        super().__init__(client, job)
        self.latencies = latencies

    def _time(self, route: str, began: float) -> None:
        self.latencies.setdefault(route, []).append((_clock() - began) * 1000)

    def next_trial(self, accumulate: bool = False) -> TrialId:
        began = _clock()
        trial = super().next_trial()
        self._time("GET /jobs/batch_size", began)
        return trial

    def report(
        self, trial: TrialId, *, time: float, energy: float, metric: float, current_epoch: int
    ) -> ReportResponse:
        began = _clock()
        answer = super().report(
            trial, time=time, energy=energy, metric=metric, current_epoch=current_epoch
        )
        self._time("POST /report", began)
        return answer

    def end_trial(self, trial: TrialId) -> None:
        began = _clock()
        super().end_trial(trial)
        self._time("PATCH /trials", began)

    def kinds(self) -> Mapping[int, str]:
        return {}  # a read of ours alone (upstream has no /api/jobs): not part of the replay


def _clock() -> float:
    return time.perf_counter()


def replay(url: str) -> dict[str, list[float]]:
    """The trace's recurrences through the server at ``url``; latencies (ms) by route."""
    latencies: dict[str, list[float]] = {}
    with ServerClient(url) as client:
        for name in WORKLOADS:
            trace = load_trace_job(name, "v100")
            spec = job_spec(trace, f"replay-{name}", mab_seed=0)
            backend = Timed(client, spec, latencies)
            simulate(trace, backend, recurrences=50, seed=0, eta_knob=0.5)
    return latencies


def summary(latencies: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    every = [v for values in latencies.values() for v in values]
    routes = {**latencies, "overall": every}
    return {
        route: {
            "requests": len(values),
            "p50_ms": round(percentile(values, 50), 3),
            "p99_ms": round(percentile(values, 99), 3),
        }
        for route, values in routes.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream-python", required=True)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    pairs = []
    for number in range(args.pairs):
        with tempfile.TemporaryDirectory() as tmp:
            with running_server(f"sqlite:///{Path(tmp) / 'ours.db'}") as url:
                ours = summary(replay(url))
            with upstream_server(args.upstream_python, tmp, workers=1) as url:
                theirs = summary(replay(url))
        pairs.append({"ours": ours, "upstream": theirs})
        o, u = ours["overall"], theirs["overall"]
        print(
            f"pair {number + 1}: ours p50 {o['p50_ms']:.2f} p99 {o['p99_ms']:.2f} ms, "
            f"upstream p50 {u['p50_ms']:.2f} p99 {u['p99_ms']:.2f} ms",
            flush=True,
        )
    ratios: dict[str, dict[str, float]] = {}
    for route in pairs[0]["ours"]:
        ratios[route] = {
            q: round(
                statistics.median(
                    p["ours"][route][f"{q}_ms"] / p["upstream"][route][f"{q}_ms"] for p in pairs
                ),
                3,
            )
            for q in ("p50", "p99")
        }
    result = {
        "commit": commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "workloads": list(WORKLOADS),
        "gpu": "v100",
        "seed": 0,
        "recurrences": 50,
        "pairs": pairs,
        "ours_over_upstream_median": ratios,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "trace_replay_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Commit {result['commit']}, {result['machine']}. The trace's recurrences "
        f"({', '.join(WORKLOADS)} on the V100, seed 0, 50 recurrences each) through each server "
        "(SQLite, 1 worker), one "
        f"sequential keep-alive client, {args.pairs} alternated pairs; ours / upstream's, medians "
        "over the pairs.",
        "",
        "| route | requests a run | ours / upstream p50 | ours / upstream p99 |",
        "|---|---|---|---|",
    ]
    for route, ratio in ratios.items():
        count = pairs[0]["ours"][route]["requests"]
        lines.append(f"| {route} | {count} | {ratio['p50']:.2f}x | {ratio['p99']:.2f}x |")
    markdown = "\n".join(lines) + "\n"
    (RESULTS / "trace_replay_latency.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    sys.exit(main())
