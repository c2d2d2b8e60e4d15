"""Prometheus metrics and request ids.

Metrics live in a registry of the app (none at import). With several worker processes the CLI
points ``PROMETHEUS_MULTIPROC_DIR`` at a shared directory, and ``/metrics`` aggregates all
workers through prometheus-client's multiprocess collector.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id: ContextVar[str] = ContextVar("zeus_bso_request_id", default="-")
"""The id of the request being served (``-`` outside a request)."""

_VALID_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class JsonFormatter(logging.Formatter):
    """One JSON object a line (``--log-format json``): time (UTC, ISO 8601), level, logger,
    message, the request id, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id.get(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every log record (for the ``%(request_id)s`` format field)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class Metrics:
    """The server's metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "zeus_bso_http_requests",
            "HTTP requests by route, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "zeus_bso_http_request_duration_seconds",
            "Time to answer an HTTP request, by route.",
            ["route", "method"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
            registry=self.registry,
        )
        self.decisions = Counter(
            "zeus_bso_decisions",
            "Batch sizes dispatched, by the job's stage and the trial's kind.",
            ["stage", "kind"],
            registry=self.registry,
        )
        self.trials = Counter(
            "zeus_bso_trial_transitions",
            "Trials entering a state (dispatched, reported, failed, abandoned, released, "
            "infeasible).",
            ["state"],
            registry=self.registry,
        )
        self.expired_leases = Counter(
            "zeus_bso_expired_leases",
            "Trials abandoned because their lease expired.",
            registry=self.registry,
        )
        self.previous_token = Counter(
            "zeus_bso_previous_token_requests",
            "Requests that sent ZEUS_BSO_PREVIOUS_TOKEN, the server's token before its rotation "
            "(none for a while: every client has the new one, and it can be unset).",
            registry=self.registry,
        )
        self.previous_token_set = Gauge(
            "zeus_bso_previous_token_set",
            "1 while ZEUS_BSO_PREVIOUS_TOKEN is set (the token before a rotation opens the "
            "server too), else 0.",
            registry=self.registry,
            multiprocess_mode="max",
        )

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format, and its content type."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


FLEET_GAUGES = (
    ("zeus_bso_jobs", "jobs", "Jobs registered."),
    ("zeus_bso_runs_ended", "runs", "Ended runs (reported, failed, abandoned, infeasible)."),
    ("zeus_bso_runs_energy_joules", "energy", "Energy ended runs spent."),
    ("zeus_bso_runs_time_seconds", "time", "Time ended runs took."),
    (
        "zeus_bso_runs_in_flight",
        "runs_in_flight",
        "Runs training now: their trials dispatched, their leases alive.",
    ),
    (
        "zeus_bso_jobs_with_savings",
        "jobs_with_savings",
        "Jobs whose savings are known (their default and another batch size delivered models).",
    ),
    (
        "zeus_bso_jobs_saving",
        "jobs_saving",
        "Of the jobs whose savings are known, those whose cost saved is not negative (the others "
        "spent more than their default would have).",
    ),
    (
        "zeus_bso_energy_saved_joules",
        "energy_saved",
        "Energy saved against delivering those jobs' models at their default batch sizes.",
    ),
    ("zeus_bso_energy_saved_ratio", "energy_saved_fraction", "Energy saved over that baseline."),
    ("zeus_bso_cost_saved", "cost_saved", "Cost saved (joules: every job's cost unit)."),
    ("zeus_bso_cost_saved_ratio", "cost_saved_fraction", "Cost saved over that baseline."),
    (
        "zeus_bso_jobs_not_learning",
        "jobs_not_learning",
        "Jobs that learn nothing now: their newest ended runs, three or more, were all released.",
    ),
    (
        "zeus_bso_jobs_mixing_models",
        "jobs_mixing_models",
        "Jobs whose runs on one hardware profile trained other models (another size, "
        "precision or way of training): their costs mix models.",
    ),
)
"""The fleet's totals as gauges (name, `zeus_bso_server.read_models.FleetSummary` field,
help): what the dashboard's summary says, for a chart of savings over time, and an alert on
jobs whose every run now trains in vain."""


class _Fleet(Collector):
    def __init__(self, totals: Mapping[str, float] | None) -> None:
        self.totals = totals

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "zeus_bso_fleet_up",
            "Whether the database answered for the fleet's totals (0: the zeus_bso_jobs... "
            "gauges are left out).",
            value=0 if self.totals is None else 1,
        )
        if self.totals is not None:
            for name, field, text in FLEET_GAUGES:
                yield GaugeMetricFamily(name, text, value=self.totals[field])


def fleet_exposition(totals: Mapping[str, float] | None) -> bytes:
    """The fleet's totals (a `FleetSummary`'s fields; None: the database did not answer) in
    Prometheus' text format: read from the database at each scrape, whichever worker answers,
    so they are the same from every worker."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Fleet(totals))
    return generate_latest(registry)


class RequestContextMiddleware:
    """Gives every request an id (``X-Request-ID``, taken from the client when it sends a sane
    one) for the logs and the answer, and records request counts and latency per route."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"").decode(
            "latin-1"
        )
        rid = given if _VALID_ID.match(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(path, method, str(status)).inc()
            self.metrics.latency.labels(path, method).observe(time.perf_counter() - started)
            request_id.reset(token)
