"""Builders for policy tests."""

from __future__ import annotations

from typing import Any

from zeus_bso.policy import TrialKind, TrialState, TrialStatus
from zeus_bso.spec import UPSTREAM_OPTIONS, CreatedJob


def make_job(**overrides: Any) -> CreatedJob:
    """A job with upstream's policy options unless ``overrides`` say otherwise."""
    fields: dict[str, Any] = {
        **UPSTREAM_OPTIONS,
        "job_id": "job-1",
        "job_id_prefix": "job",
        "batch_sizes": [16, 32, 64, 128, 256],
        "default_batch_size": 64,
        "max_power": 250.0,
        "number_of_gpus": 1,
        "gpu_model": "V100",
    }
    fields.update(overrides)
    return CreatedJob(**fields)


def explored(
    round_index: int,
    batch_size: int,
    number: int,
    *,
    converged: bool | None = None,
    cost: float | None = None,
    status: TrialStatus | None = None,
) -> TrialState:
    """An exploration record; reported unless ``status`` says otherwise."""
    if status is None:
        status = TrialStatus.REPORTED
    return TrialState(
        number,
        batch_size,
        TrialKind.EXPLORATION,
        round_index,
        status,
        converged=converged,
        cost=cost,
    )
