"""Trace-driven simulation of recurring jobs against the policy (in-process or over HTTP)."""

from zeus_bso.errors import TraceError
from zeus_bso.sim.memory import InMemoryJob
from zeus_bso.sim.runner import (
    MAX_TRIES,
    Backend,
    Recurrence,
    ServerBackend,
    TrialOutcome,
    in_process,
    job_spec,
    parent_job,
    simulate,
)
from zeus_bso.sim.trace import GPUS, WORKLOADS, TraceJob, Workload, load_trace_job

__all__ = [
    "GPUS",
    "MAX_TRIES",
    "WORKLOADS",
    "Backend",
    "InMemoryJob",
    "Recurrence",
    "ServerBackend",
    "TraceError",
    "TraceJob",
    "TrialOutcome",
    "Workload",
    "in_process",
    "job_spec",
    "load_trace_job",
    "parent_job",
    "simulate",
]
