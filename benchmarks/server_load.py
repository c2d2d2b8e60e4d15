"""Concurrent load on one job: throughput and errors with several clients and server workers.

The workload of the reliability goal: 32 client threads on one job, each repeating (ask for a
batch size, report once, end the trial) 8 times, so 256 batch-size requests in all. Runs on SQLite
with 1 and 2 workers, on PostgreSQL with 4 workers (a throwaway PostgreSQL 15 server is
started with initdb/pg_ctl, as the tests do) and, where Debian's mariadb-server is installed,
on MariaDB with 4 workers (MySQL's path, a throwaway server as the tests start it).
Sequential latency and the 100,000-trial job are measured by server_latency.py.

With ``--upstream-python``, upstream Zeus 0.16's server runs the same load with the same client
(2 workers on SQLite, as in its own deployment guide). It needs a separate environment:

    python3 -m venv /tmp/upstream && /tmp/upstream/bin/pip install torch==2.13.0 \
        'zeus[bso-server]==0.16.0' aiosqlite greenlet

    .venv/bin/python benchmarks/server_load.py [--threads 32] [--rounds 8] [--repeat 3]
        [--upstream-python /tmp/upstream/bin/python]

Writes benchmarks/results/server_load.{json,md} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _server import LightClient, running_server, upstream_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.mariadb import MariaDBServer
from tests.postgres import PostgresServer

RESULTS = Path(__file__).parent / "results"


def job_body(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_id_prefix": "load",
        "batch_sizes": [32, 64, 128, 256],
        "default_batch_size": 64,
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "load-gpu",
    }


def run_load(url: str, job_id: str, threads: int, rounds: int) -> dict[str, Any]:
    with LightClient(url) as http:
        status, answer = http.request("POST", "/jobs", job_body(job_id))
        if status not in (200, 201):
            raise SystemExit(f"registration failed: {status} {answer}")
    barrier = threading.Barrier(threads)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def client(index: int) -> None:
        codes: Counter[int] = Counter()
        with LightClient(url) as http:
            barrier.wait()
            for _ in range(rounds):
                status, trial = http.request("GET", "/jobs/batch_size", params={"job_id": job_id})
                codes[status] += 1
                if status != 200:
                    continue
                result = {**trial, "time": 10.0, "energy": 1000.0 + index, "metric": 0.9}
                status, _ = http.request("POST", "/report", {**result, "current_epoch": 1})
                codes[status] += 1
                codes[http.request("PATCH", "/trials", trial)[0]] += 1
        with lock:
            statuses.update(codes)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(client, range(threads)))
    elapsed = time.perf_counter() - started
    requests = sum(statuses.values())
    return {
        "seconds": elapsed,
        "batch_size_requests_per_s": threads * rounds / elapsed,
        "requests_per_s": requests / elapsed,
        "errors_5xx": sum(n for code, n in statuses.items() if code >= 500),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def measure(label: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    runs = [
        run_load(url, f"load-{label}-{i}-{time.time_ns()}", args.threads, args.rounds)
        for i in range(args.repeat)
    ]
    return {
        "setup": label,
        "runs": runs,
        "batch_size_requests_per_s": statistics.median(
            r["batch_size_requests_per_s"] for r in runs
        ),
        "requests_per_s": statistics.median(r["requests_per_s"] for r in runs),
        "errors_5xx": sum(r["errors_5xx"] for r in runs),
        "non_200": sum(n for r in runs for code, n in r["statuses"].items() if code != "200"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--only",
        choices=("sqlite", "postgresql", "mysql"),
        help="measure one backend (and do not overwrite the saved results)",
    )
    parser.add_argument(
        "--upstream-python",
        help="Python of an environment with zeus[bso-server]==0.16.0: measure upstream too",
    )
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2) if args.only in (None, "sqlite") else ():
            db = Path(tmp) / f"load-{workers}.db"
            with running_server(f"sqlite:///{db}", workers=workers) as url:
                results.append(measure(f"SQLite, {workers} worker(s)", url, args))
        if args.only in (None, "postgresql"):
            pg = PostgresServer()
            try:
                with running_server(pg.new_database(), workers=4) as url:
                    results.append(measure("PostgreSQL 15, 4 workers", url, args))
            finally:
                pg.stop()
        if args.only in (None, "mysql"):
            try:
                mariadb = MariaDBServer()
            except FileNotFoundError as err:
                if args.only:
                    raise
                print(f"MariaDB skipped: {err}", file=sys.stderr)
            else:
                try:
                    with running_server(mariadb.new_database(), workers=4) as url:
                        results.append(measure("MariaDB 10.11, 4 workers", url, args))
                finally:
                    mariadb.stop()
        if args.upstream_python:
            with upstream_server(args.upstream_python, tmp, workers=2) as url:
                results.append(measure("upstream Zeus 0.16, SQLite, 2 workers", url, args))

    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "threads": args.threads,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "results": results,
        "upstream_zeus_0_16_as_published_in_the_issue": {
            "batch_size_requests_per_s": 38,
            "errors_5xx": 32,
        },
    }
    if args.only:
        print(json.dumps(results, indent=2))
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "server_load.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"{args.threads} client threads on one job, each {args.rounds} x (batch size, report, end);"
        f" median of {args.repeat} runs; {summary['machine']}.",
        "",
        "| setup | batch-size requests/s | all requests/s | 5xx | other non-200 |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['setup']} | {r['batch_size_requests_per_s']:.0f} | {r['requests_per_s']:.0f}"
            f" | {r['errors_5xx']} | {r['non_200'] - r['errors_5xx']} |"
        )
    lines.append(
        "| upstream Zeus 0.16, SQLite, 2 workers, as the issue measured it | 38 | | 32 of 768 | |"
    )
    markdown = "\n".join(lines) + "\n"
    (RESULTS / "server_load.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
