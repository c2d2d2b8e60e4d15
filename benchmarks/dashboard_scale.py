"""Does the dashboard's job list cost more as the fleet grows? Its page against the API's list.

A real ``zeus-bso-server`` (SQLite file, one worker) holds ``--jobs`` jobs, each with a few
ended runs (one converged at the default batch size, one at another size, one that did not
converge), registered and run through the HTTP API for the first ``--seed-jobs`` and copied row
for row (new ids) up to the rest. Measured, by one keep-alive client, at 1,000 and 10,000 jobs:

- ``GET /dashboard``: the first page of the job list with the fleet's totals above it;
- ``GET /dashboard?prefix=...``: the same for one job's prefix;
- ``GET /api/jobs?limit=1000``: the API's list of a thousand jobs, for scale;
- other jobs' dispatch + report + end while two viewers reload the dashboard in a loop.

Goal: a dashboard page at 10,000 jobs at most 2x ``GET /api/jobs?limit=1000`` there. Prints a
table and writes benchmarks/results/dashboard_scale.{json,md}.

    .venv/bin/python benchmarks/dashboard_scale.py [--sizes 1000 10000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from _figures import commit
from _server import running_server

RESULTS = Path(__file__).parent / "results"
GPU = {"max_power": 300.0, "number_of_gpus": 1, "gpu_model": "A100"}


def job_body(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_id_prefix": job_id.split("-")[0],
        "batch_sizes": [32, 64, 128, 256],
        "default_batch_size": 64,
        "target_metric": 0.5,
        "max_epochs": 3,
        "mab_seed": 1,
        **GPU,
    }


def run_once(http: httpx.Client, job_id: str, metric: float) -> None:
    """One run: dispatch, one report, end."""
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).raise_for_status().json()
    report = {**trial, "time": 10.0, "energy": 3000.0, "metric": metric, "current_epoch": 1}
    http.post("/report", json=report).raise_for_status()
    http.request("PATCH", "/trials", json=trial).raise_for_status()


def seed(http: httpx.Client, count: int) -> None:
    """``count`` jobs, each with three ended runs."""
    for index in range(count):
        job_id = f"fleet{index % 10}-{index:06d}"
        http.post("/jobs", json=job_body(job_id)).raise_for_status()
        for metric in (0.9, 0.9, 0.1):
            run_once(http, job_id, metric)


def copy_rows(database: Path, total: int) -> None:
    """Copy the seeded jobs with their trials under new ids until there are ``total``."""
    with sqlite3.connect(database) as conn:
        seeded = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        round_number = 0
        while conn.execute("SELECT count(*) FROM jobs").fetchone()[0] < total:
            round_number += 1
            missing = total - conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
            suffix = f"-c{round_number}"
            columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
            chosen = (
                "SELECT job_id FROM jobs WHERE job_id NOT LIKE '%-c%' "
                f"ORDER BY job_id LIMIT {missing}"
            )
            others = ", ".join(c for c in columns if c != "job_id")
            conn.execute(
                f"INSERT INTO jobs (job_id, {others}) SELECT job_id || '{suffix}', {others} "
                f"FROM jobs WHERE job_id IN ({chosen})"
            )
            trial_columns = [row[1] for row in conn.execute("PRAGMA table_info(trials)")]
            rest = ", ".join(c for c in trial_columns if c != "job_id")
            conn.execute(
                f"INSERT INTO trials (job_id, {rest}) SELECT job_id || '{suffix}', {rest} "
                f"FROM trials WHERE job_id IN ({chosen})"
            )
            if round_number > total // max(seeded, 1) + 1:
                raise SystemExit("could not copy the jobs")
        conn.commit()


def median_ms(http: httpx.Client, path: str, repeats: int, **params: Any) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        http.get(path, params=params).raise_for_status()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def runs_beside_viewers(server: str, viewers: int, runs: int) -> float:
    """Median ms of other jobs' dispatch + report + end while ``viewers`` reload the dashboard."""
    stop = threading.Event()

    def view() -> None:
        with httpx.Client(base_url=server, timeout=120) as viewer:
            while not stop.is_set():
                viewer.get("/dashboard").raise_for_status()

    threads = [threading.Thread(target=view) for _ in range(viewers)]
    for thread in threads:
        thread.start()
    try:
        times = []
        with httpx.Client(base_url=server, timeout=120) as http:
            http.post("/jobs", json=job_body("beside-job")).raise_for_status()
            for _ in range(runs):
                began = time.perf_counter()
                run_once(http, "beside-job", 0.9)
                times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times)
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def measure(size: int, seeded: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "fleet.db"
        with (
            running_server(f"sqlite:///{database}") as server,
            httpx.Client(base_url=server, timeout=120) as http,
        ):
            seed(http, min(seeded, size))
        copy_rows(database, size)
        with (
            running_server(f"sqlite:///{database}") as server,
            httpx.Client(base_url=server, timeout=120) as http,
        ):
            jobs = len(http.get("/api/jobs", params={"limit": 1000}).json())
            assert jobs == min(1000, size), jobs
            figures = {
                "jobs": size,
                "dashboard_ms": median_ms(http, "/dashboard", repeats),
                "dashboard_prefix_ms": median_ms(http, "/dashboard", repeats, prefix="fleet3"),
                "api_jobs_1000_ms": median_ms(http, "/api/jobs", repeats, limit=1000),
            }
            figures["alone_run_ms"] = runs_beside_viewers(server, 0, 50)
            figures["beside_two_viewers_run_ms"] = runs_beside_viewers(server, 2, 50)
    figures["dashboard_over_api"] = figures["dashboard_ms"] / figures["api_jobs_1000_ms"]
    return {
        key: round(value, 2) if isinstance(value, float) else value
        for key, value in figures.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--seed-jobs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    began = time.perf_counter()
    rows = [measure(size, args.seed_jobs, args.repeats) for size in args.sizes]
    result = {
        "commit": commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "database": "SQLite (WAL), 1 worker",
        "repeats": args.repeats,
        "seconds": round(time.perf_counter() - began, 1),
        "sizes": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dashboard_scale.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Commit {result['commit']}, {result['database']}, {result['machine']}; one keep-alive "
        f"client, medians of {args.repeats} requests (runs: of 50). Goal: the dashboard at "
        "10,000 jobs at most 2x GET /api/jobs?limit=1000.",
        "",
        "| jobs | GET /dashboard (ms) | with a prefix (ms) | GET /api/jobs?limit=1000 (ms) "
        "| dashboard / API | a run alone (ms) | a run beside two viewers (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['jobs']:,} | {row['dashboard_ms']:.1f} | {row['dashboard_prefix_ms']:.1f} "
            f"| {row['api_jobs_1000_ms']:.1f} | {row['dashboard_over_api']:.2f}x "
            f"| {row['alone_run_ms']:.1f} | {row['beside_two_viewers_run_ms']:.1f} |"
        )
    markdown = "\n".join(lines) + "\n"
    (RESULTS / "dashboard_scale.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    sys.exit(main())
