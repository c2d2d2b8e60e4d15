"""Does a request get slower as a job ages? Latency early and late in a job's life.

Two workloads, each driven through a real ``zeus-bso-server`` (SQLite file, one worker) by one
sequential keep-alive client, the way training runs use it:

- a job on two hardware profiles (runs alternate between two GPU kinds), ``--trials`` runs of
  one epoch each: dispatch and report latency over the trials around trial 10 and around the
  last;
- one run of ``--epochs`` epochs (a job that never stops it): report latency around epoch 10
  and around the last.

Goal: late within 1.5x of early, for every route. Prints a table and writes
benchmarks/results/aging_latency.{json,md}.

    .venv/bin/python benchmarks/aging_latency.py [--trials 20000] [--epochs 20000] [--window 200]
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
from pathlib import Path
from typing import Any

import httpx

from _figures import commit
from _server import running_server

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
GPUS = (
    {"max_power": 300.0, "number_of_gpus": 1, "gpu_model": "V100"},
    {"max_power": 400.0, "number_of_gpus": 1, "gpu_model": "A100"},
)


def job_body(job_id: str, **options: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_id_prefix": "aging",
        "batch_sizes": [32, 64, 128, 256],
        "default_batch_size": 64,
        "target_metric": 0.5,
        "mab_seed": 1,
        **GPUS[0],
        **options,
    }


def timed(http: httpx.Client, method: str, path: str, **kwargs: Any) -> tuple[float, Any]:
    begin = time.perf_counter()
    response = http.request(method, path, **kwargs)
    elapsed = (time.perf_counter() - begin) * 1000
    if response.status_code >= 300:
        raise SystemExit(f"{method} {path} answered {response.status_code}: {response.text}")
    return elapsed, response.json() if response.content else None


def two_profile_job(http: httpx.Client, trials: int, window: int) -> dict[str, list[float]]:
    """Run ``trials`` one-epoch runs alternating between two GPU kinds; latencies (ms) of the
    first ``window`` runs from trial 10 on and of the last ``window``."""
    for gpu in GPUS:  # registered on both: the job has two profiles
        http.post("/jobs", json=job_body("aging-profiles", **gpu)).raise_for_status()
    early = range(10, 10 + window)
    late = range(trials - window + 1, trials + 1)
    latencies: dict[str, list[float]] = {}
    for number in range(1, trials + 1):
        gpu = GPUS[number % 2]
        params = {"job_id": "aging-profiles", **{k: str(v) for k, v in gpu.items()}}
        dispatch_ms, trial = timed(http, "GET", "/jobs/batch_size", params=params)
        speed = 1.0 if gpu is GPUS[0] else 0.6
        report = {
            **trial,
            "time": 10.0 * speed,
            "energy": 1000.0 * speed * (1 + trial["batch_size"] / 256),
            "metric": 0.6 if number % 3 else 0.1,
            "current_epoch": 1,
        }
        report_ms, answer = timed(http, "POST", "/report", json=report)
        if not answer["stop_train"]:
            timed(http, "PATCH", "/trials", json=trial)
        phase = "early" if number in early else "late" if number in late else None
        if phase is not None:
            latencies.setdefault(f"{phase} GET /jobs/batch_size", []).append(dispatch_ms)
            latencies.setdefault(f"{phase} POST /report", []).append(report_ms)
    return latencies


def long_run(http: httpx.Client, epochs: int, window: int) -> dict[str, list[float]]:
    """One run of ``epochs`` epochs whose metric keeps improving slowly (its learning curve
    grows with every report); report latencies around epoch 10 and the last ``window``. Then,
    as a control for the machine's drift, a second such run's first epochs on the same server
    (``control``): late against control is the growth of the run, not of the minute."""
    latencies: dict[str, list[float]] = {}
    for name, length, phases in (
        ("aging-epochs", epochs, (("early", 10, 10 + window), ("late", epochs - window, epochs))),
        ("aging-control", 10 + window, (("control", 10, 10 + window),)),
    ):
        body = job_body(name, max_epochs=epochs + 1, beta_knob=None, target_metric=2.0)
        http.post("/jobs", json=body).raise_for_status()
        _, trial = timed(http, "GET", "/jobs/batch_size", params={"job_id": name})
        for epoch in range(1, length + 1):
            report = {
                **trial,
                "time": 10.0 * epoch,
                "energy": 1000.0 * epoch,
                "metric": 1.0 - 1.0 / (1 + epoch),
                "current_epoch": epoch,
            }
            elapsed, _ = timed(http, "POST", "/report", json=report)
            for phase, first, last in phases:
                if first <= epoch < last:
                    latencies.setdefault(f"{phase} POST /report", []).append(elapsed)
    return latencies


def summary(latencies: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "n": len(values),
            "median_ms": round(statistics.median(values), 3),
            "mean_ms": round(statistics.fmean(values), 3),
        }
        for name, values in latencies.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=200)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_server(f"sqlite:///{Path(tmp) / 'aging.db'}") as server,
        httpx.Client(base_url=server, timeout=60) as http,
    ):
        began = time.perf_counter()
        profiles = summary(two_profile_job(http, args.trials, args.window))
        epochs = summary(long_run(http, args.epochs, args.window))
        took = time.perf_counter() - began
    rows = []
    for workload, measured, at in (
        ("two-profile job", profiles, (10, args.trials)),
        (f"one run of {args.epochs:,} epochs", epochs, (10, args.epochs)),
    ):
        for route in sorted({name.split(" ", 1)[1] for name in measured}):
            early, late = measured[f"early {route}"], measured[f"late {route}"]
            ratio = late["median_ms"] / early["median_ms"]
            rows.append((workload, route, at, early["median_ms"], late["median_ms"], ratio))
            control = measured.get(f"control {route}")
            if control is not None:
                again = late["median_ms"] / control["median_ms"]
                row = (f"{workload}, against a fresh run after it", route, (10, at[1]))
                rows.append((*row, control["median_ms"], late["median_ms"], again))
    result = {
        "commit": commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "database": "SQLite (WAL), 1 worker",
        "trials": args.trials,
        "epochs": args.epochs,
        "window": args.window,
        "seconds": round(took, 1),
        "two_profile_job": profiles,
        "long_run": epochs,
        "late_over_early": {f"{w}: {r}": round(x, 3) for w, r, _, _, _, x in rows},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "aging_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Commit {result['commit']}, {result['database']}, {result['machine']}; one sequential "
        f"keep-alive client; medians over {args.window} requests. Goal: late <= 1.5x early.",
        "",
        "| workload | route | early (at) | early median (ms) | late (at) | late median (ms) "
        "| late / early |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, route, (first, last), early_ms, late_ms, ratio in rows:
        lines.append(
            f"| {workload} | {route} | {first:,} | {early_ms:.2f} | {last:,} | {late_ms:.2f} "
            f"| {ratio:.2f}x |"
        )
    markdown = "\n".join(lines) + "\n"
    (RESULTS / "aging_latency.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    sys.exit(main())
