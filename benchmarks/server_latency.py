"""Sequential latency of the server, per route, on a fresh job and on a job with a long history.

Starts ``zeus-bso-server serve`` on a temporary SQLite file (or, with ``--backend postgresql``,
a throwaway PostgreSQL 15 server started with initdb/pg_ctl, as the tests do), then drives it
with one keep-alive client: each recurrence asks for a batch size, reports after every epoch
and ends its trial.
The same is measured on a job whose history was filled with ``--history`` stored trials
beforehand, to show that a request's cost does not grow with a job's history.

    .venv/bin/python benchmarks/server_latency.py [--recurrences 400] [--history 100000]
        [--backend sqlite|postgresql [--prepare-threshold 5]]
        [--upstream-python /tmp/upstream/bin/python]

With ``--upstream-python`` (an environment with ``zeus[bso-server]==0.16.0``; see
server_load.py), upstream's server (1 worker, SQLite) is measured on a fresh job in the same run,
in ``--pairs`` alternated pairs (ours on a fresh server and database, then upstream's, and again):
the ratios are medians over the pairs, so that a slow minute of the machine weighs on both.

Prints a table and writes benchmarks/results/server_latency.{json,md} (SQLite) or
server_latency_postgresql.{json,md} (with ``--prepare-threshold``:
server_latency_postgresql_prepared.{json,md}).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from _figures import percentile
from _server import running_server, upstream_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.postgres import PostgresServer

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


TRIAL_COLUMNS = [
    "job_id",
    "trial_number",
    "batch_size",
    "kind",
    "round",
    "status",
    "created_at",
    "updated_at",
    "lease_expires_at",
    "epochs",
    "time",
    "energy",
    "metric",
    "cost",
    "converged",
    "message",
]


def history(job_id: str, start: int, trials: int) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """``trials`` finished bandit-stage trials numbered from ``start``, as the server would have
    stored them, and the job row's columns that go with them."""
    rng = random.Random(0)
    rows = []
    costs: dict[int, list[float]] = {b: [] for b in BATCH_SIZES}
    now = time.time()
    for number in range(start, start + trials):
        batch_size = rng.choice(BATCH_SIZES)
        cost = 1000.0 + batch_size + rng.gauss(0, 50)
        costs[batch_size].append(cost)
        head = (job_id, number, batch_size, "bandit", None, "reported", now, now, None, 2)
        rows.append((*head, 1.0, 1.0, 0.6, cost, True, "Train succeeded"))
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
    best_batch_size = min(costs, key=lambda b: min(costs[b]))
    job = {
        "stats": json.dumps(stats),
        "best_batch_size": best_batch_size,
        "best_cost": min(costs[best_batch_size]),
        "next_trial_number": start + trials,
        "arms": json.dumps(BATCH_SIZES),  # arms: the bandit stage (migration 0011)
    }
    return rows, job


def fill_sqlite(db: Path, job_id: str, trials: int) -> None:
    """Store ``trials`` finished trials for the job in the SQLite file."""
    with sqlite3.connect(db) as conn:
        (start,) = conn.execute(
            "SELECT next_trial_number FROM jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
        rows, job = history(job_id, start, trials)
        placeholders = ", ".join("?" * len(TRIAL_COLUMNS))
        conn.executemany(
            f"INSERT INTO trials ({', '.join(TRIAL_COLUMNS)}) VALUES ({placeholders})", rows
        )
        assignments = ", ".join(f"{name} = ?" for name in job)
        conn.execute(f"UPDATE jobs SET {assignments} WHERE job_id = ?", (*job.values(), job_id))
    with sqlite3.connect(db) as conn:
        # Fold the bulk insert into the database file now, not during the measured requests.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def fill_postgresql(url: str, job_id: str, trials: int) -> None:
    """Store ``trials`` finished trials for the job in the PostgreSQL database."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT next_trial_number FROM jobs WHERE job_id = %s", (job_id,)
        ).fetchone()
        assert row is not None
        rows, job = history(job_id, row[0], trials)
        with conn.cursor().copy(f"COPY trials ({', '.join(TRIAL_COLUMNS)}) FROM STDIN") as copy:
            for record in rows:
                copy.write_row(record)
        casts = {"stats": "::json", "arms": "::json"}
        assignments = ", ".join(f"{name} = %s{casts.get(name, '')}" for name in job)
        conn.execute(f"UPDATE jobs SET {assignments} WHERE job_id = %s", (*job.values(), job_id))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE trials")


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


def fresh_job(http: httpx.Client, warmup: int, recurrences: int) -> dict[str, list[float]]:
    """Warm a server up on one job, then drive a fresh job; its latencies (ms) per route."""
    for job_id in ("bench-fresh", "bench-warmup"):
        http.post("/jobs", json=job_body(job_id)).raise_for_status()
    drive(http, "bench-warmup", warmup)
    return drive(http, "bench-fresh", recurrences)


def ratio_medians(pairs: list[dict[str, Any]]) -> dict[str, float] | None:
    """The medians over alternated pairs of ours / upstream's p50 and p99."""
    if not pairs:
        return None
    medians = {}
    for q in ("p50", "p99"):
        ratios = [p["ours"][f"{q}_ms"] / p["upstream"][f"{q}_ms"] for p in pairs]
        medians[q] = round(statistics.median(ratios), 3)
    return medians


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


@contextlib.contextmanager
def database(backend: str) -> Iterator[tuple[str, Callable[[str, int], None]]]:
    """A fresh database of ``backend``: its URL and a function that fills a job's history."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.db"
            yield f"sqlite:///{db}", lambda job_id, n: fill_sqlite(db, job_id, n)
        return
    pg = PostgresServer()
    try:
        url = pg.new_database()
        yield url, lambda job_id, n: fill_postgresql(url, job_id, n)
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recurrences", type=int, default=400)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="SQLite file (default) or a throwaway PostgreSQL 15 server (initdb/pg_ctl)",
    )
    parser.add_argument(
        "--prepare-threshold",
        type=int,
        help="PostgreSQL: the server prepares a statement on the server from this use on a "
        "connection (its URL's prepare_threshold; none by default); results in "
        "server_latency_postgresql_prepared.{json,md}",
    )
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs with upstream")
    parser.add_argument(
        "--upstream-python",
        help="Python of an environment with zeus[bso-server]==0.16.0: measure upstream too",
    )
    args = parser.parse_args()

    prepared = args.backend == "postgresql" and args.prepare_threshold is not None
    with (
        database(args.backend) as (url, fill),
        running_server(
            f"{url}?prepare_threshold={args.prepare_threshold}" if prepared else url
        ) as server,
        httpx.Client(base_url=server, timeout=30) as http,
    ):
        for job_id in ("bench-fresh", "bench-long", "bench-warmup"):
            http.post("/jobs", json=job_body(job_id)).raise_for_status()
        fill("bench-long", args.history)
        drive(http, "bench-warmup", args.warmup)
        fresh = summarise(drive(http, "bench-fresh", args.recurrences))
        long = summarise(drive(http, "bench-long", args.recurrences))
    upstream = None
    pairs: list[dict[str, Any]] = []
    if args.upstream_python:
        for _ in range(args.pairs):
            with (
                database("sqlite") as (pair_url, _),
                running_server(pair_url) as server,
                httpx.Client(base_url=server, timeout=30) as http,
            ):
                ours = summarise(fresh_job(http, args.warmup, args.recurrences))
            with (
                tempfile.TemporaryDirectory() as tmp,
                upstream_server(args.upstream_python, tmp, workers=1) as server,
                httpx.Client(base_url=server, timeout=30) as http,
            ):
                upstream = summarise(fresh_job(http, args.warmup, args.recurrences))
            pairs.append({"ours": ours["overall"], "upstream": upstream["overall"]})
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "database": "SQLite (WAL), 1 worker"
        if args.backend == "sqlite"
        else "PostgreSQL 15 (loopback), 1 worker, "
        + (
            f"statements prepared from their use {args.prepare_threshold}"
            if prepared
            else "no statement prepared"
        ),
        "recurrences": args.recurrences,
        "epochs_per_run": EPOCHS,
        "history_trials": args.history,
        "fresh_job": fresh,
        "job_with_history": long,
        "upstream_zeus_0_16_sqlite_fresh_job": upstream,
        "alternated_pairs": pairs,
        "ratio_medians": ratio_medians(pairs),
    }
    RESULTS.mkdir(exist_ok=True)
    name = "server_latency" if args.backend == "sqlite" else f"server_latency_{args.backend}"
    name += "_prepared" if prepared else ""
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
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
    medians = ratio_medians(pairs)
    if medians is not None:
        lines += [
            "",
            f"Against upstream Zeus 0.16 (SQLite, 1 worker), fresh job, overall, {len(pairs)} "
            "alternated pairs (ours, then upstream, each on a fresh server and database):",
            "",
            "| pair | ours p50 (ms) | ours p99 (ms) | upstream p50 (ms) | upstream p99 (ms) "
            "| p50 ratio | p99 ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for number, pair in enumerate(pairs, 1):
            ours, theirs = pair["ours"], pair["upstream"]
            lines.append(
                f"| {number} | {ours['p50_ms']:.2f} | {ours['p99_ms']:.2f} "
                f"| {theirs['p50_ms']:.2f} | {theirs['p99_ms']:.2f} "
                f"| {ours['p50_ms'] / theirs['p50_ms']:.2f}x "
                f"| {ours['p99_ms'] / theirs['p99_ms']:.2f}x |"
            )
        lines += [
            "",
            f"Medians over the pairs: p50 {medians['p50']:.2f}x, p99 {medians['p99']:.2f}x "
            "upstream's.",
        ]
    markdown = "\n".join(lines) + "\n"
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
