"""Sequential latency of the server, per route, on a fresh job and on a job with a long history.

Starts ``zeus-bso-server serve`` on a temporary SQLite file, then drives it with one keep-alive
client: each recurrence asks for a batch size, reports after every epoch and ends its trial.
The same is measured on a job whose history was filled with ``--history`` stored trials
beforehand, to show that a request's cost does not grow with a job's history.

    .venv/bin/python benchmarks/server_latency.py [--recurrences 400] [--history 100000]

Prints a table and writes benchmarks/results/server_latency.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from _server import running_server

RESULTS = Path(__file__).parent / "results"
EPOCHS = 3
BATCH_SIZES = [32, 64, 128, 256]


def job_body(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_id_prefix": "bench",
        "batch_sizes": BATCH_SIZES,
        "default_batch_size": 64,
        "max_epochs": 10,
        "target_metric": 0.5,
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "bench-gpu",
        "mab_seed": 1,
    }


def fill_history(db: Path, job_id: str, trials: int) -> None:
    """Store ``trials`` finished bandit-stage trials for the job, as the server would have."""
    rng = random.Random(0)
    with sqlite3.connect(db) as conn:
        start = conn.execute(
            "SELECT next_trial_number FROM jobs WHERE job_id = ?", (job_id,)
        ).fetchone()[0]
        rows = []
        costs: dict[int, list[float]] = {b: [] for b in BATCH_SIZES}
        now = time.time()
        for number in range(start, start + trials):
            batch_size = rng.choice(BATCH_SIZES)
            cost = 1000.0 + batch_size + rng.gauss(0, 50)
            costs[batch_size].append(cost)
            head = (job_id, number, batch_size, "bandit", None, "reported", now, now, None, 2)
            rows.append((*head, 1.0, 1.0, 0.6, cost, True, "Train succeeded"))
        conn.executemany(
            "INSERT INTO trials (job_id, trial_number, batch_size, kind, round, status, created_at,"
            " updated_at, lease_expires_at, epochs, time, energy, metric, cost, converged, message)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        stats = {}
        for batch_size, values in costs.items():
            mean = statistics.fmean(values)
            stats[str(batch_size)] = {
                "reports": len(values),
                "mean_cost": mean,
                "m2_cost": sum((v - mean) ** 2 for v in values),
                "converged_count": len(values),
                "converged_cost_sum": sum(values),
                "best_converged_cost": min(values),
            }
        conn.execute("UPDATE jobs SET stats = ? WHERE job_id = ?", (json.dumps(stats), job_id))
        best_batch_size = min(costs, key=lambda b: min(costs[b]))
        conn.execute(
            "UPDATE jobs SET best_batch_size = ?, best_cost = ? WHERE job_id = ?",
            (best_batch_size, min(costs[best_batch_size]), job_id),
        )
        conn.execute(
            "UPDATE jobs SET next_trial_number = ?, stage = 'bandit', arms = ? WHERE job_id = ?",
            (start + trials, json.dumps(BATCH_SIZES), job_id),
        )
    with sqlite3.connect(db) as conn:
        # Fold the bulk insert into the database file now, not during the measured requests.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def drive(http: httpx.Client, job_id: str, recurrences: int) -> dict[str, list[float]]:
    """Run recurrences; returns latencies (ms) per route."""
    latencies: dict[str, list[float]] = {"GET /jobs/batch_size": [], "POST /report": []}
    latencies["PATCH /trials"] = []

    def timed(route: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        begin = time.perf_counter()
        response = http.request(method, path, **kwargs)
        latencies[route].append((time.perf_counter() - begin) * 1000)
        if response.status_code >= 300:
            raise SystemExit(f"{route} answered {response.status_code}: {response.text}")
        return response

    for _ in range(recurrences):
        trial = timed(
            "GET /jobs/batch_size", "GET", "/jobs/batch_size", params={"job_id": job_id}
        ).json()
        for epoch in range(1, EPOCHS + 1):
            result = {
                **trial,
                "time": 10.0 * epoch,
                "energy": 1000.0 * epoch * (1 + trial["batch_size"] / 256),
                "metric": 0.2 * epoch,
                "current_epoch": epoch,
            }
            if timed("POST /report", "POST", "/report", json=result).json()["stop_train"]:
                break
        timed("PATCH /trials", "PATCH", "/trials", json=trial)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summarise(latencies: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    every = [v for values in latencies.values() for v in values]
    table = {route: values for route, values in latencies.items()} | {"overall": every}
    return {
        route: {
            "n": len(values),
            "p50_ms": round(percentile(values, 50), 3),
            "p99_ms": round(percentile(values, 99), 3),
            "mean_ms": round(statistics.fmean(values), 3),
        }
        for route, values in table.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recurrences", type=int, default=400)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        with (
            running_server(f"sqlite:///{db}") as url,
            httpx.Client(base_url=url, timeout=30) as http,
        ):
            for job_id in ("bench-fresh", "bench-long", "bench-warmup"):
                http.post("/jobs", json=job_body(job_id)).raise_for_status()
            fill_history(db, "bench-long", args.history)
            drive(http, "bench-warmup", args.warmup)
            fresh = summarise(drive(http, "bench-fresh", args.recurrences))
            long = summarise(drive(http, "bench-long", args.recurrences))

    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "database": "SQLite (WAL), 1 worker",
        "recurrences": args.recurrences,
        "epochs_per_run": EPOCHS,
        "history_trials": args.history,
        "fresh_job": fresh,
        "job_with_history": long,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "server_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Sequential keep-alive client, {result['database']}, {result['machine']}.",
        "",
        f"| route | fresh job p50 (ms) | fresh p99 (ms) | {args.history:,} trials p50 (ms) "
        f"| {args.history:,} trials p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    for route in fresh:
        lines.append(
            f"| {route} | {fresh[route]['p50_ms']:.2f} | {fresh[route]['p99_ms']:.2f} "
            f"| {long[route]['p50_ms']:.2f} | {long[route]['p99_ms']:.2f} |"
        )
    markdown = "\n".join(lines) + "\n"
    (RESULTS / "server_latency.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
