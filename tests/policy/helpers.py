"""Builders for policy tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zeus_bso.policy import (
    ByProfile,
    EpochSums,
    JobState,
    Report,
    StopRules,
    TrialKind,
    TrialState,
    TrialStatus,
    Verdict,
    after_report,
    judge_report,
    zeus_cost,
)
from zeus_bso.spec import UPSTREAM_OPTIONS, CreatedJob, ReportResponse


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


def judged(
    job: CreatedJob,
    *,
    batch_size: int,
    time: float,
    energy: float,
    metric: float,
    current_epoch: int,
    best_cost: float | None,
    exploring: bool = False,
    epochs_left: int | None = None,
    epoch_cost: float | None = None,
    fresh_cost: float | None = None,
) -> Verdict:
    """The stop rules' verdict on a report of cumulative ``time`` and ``energy``, priced on the
    job's GPUs."""
    cost = zeus_cost(energy, time, job.eta_knob, job.max_power)
    report = Report(
        batch_size, cost, metric, current_epoch, exploring, epochs_left, epoch_cost, fresh_cost
    )
    return judge_report(StopRules.of(job), report, best_cost)


def with_readings(
    state: JobState, readings: Mapping[tuple[str, int], tuple[float, float]]
) -> JobState:
    """The job's state keeping ``readings`` (a mean epoch's energy and time by profile and batch
    size, each from one trial) as its epochs by profile."""
    epochs = {key: EpochSums(energy, time, 1) for key, (energy, time) in readings.items()}
    return replace(state, by_profile=ByProfile(epochs))


def trained(
    job: CreatedJob,
    state: JobState,
    trial: TrialState,
    epoch_cost: float,
    reaches: int | None = None,
    most: int = 20,
) -> list[ReportResponse]:
    """Report ``trial``'s epochs, each costing ``epoch_cost`` (no time), its metric at 0.9 from
    epoch ``reaches`` on (None: 0.1, never the target), until the answer stops it or ``most``
    epochs: each answer."""
    answers = []
    for epoch in range(1, most + 1):
        reached = reaches is not None and epoch >= reaches
        step = after_report(
            job,
            state,
            trial,
            time=0.0,
            energy=2 * epoch_cost * epoch,
            metric=0.9 if reached else 0.1,
            current_epoch=epoch,
        )
        answers.append(step.answer)
        state, trial = step.job, step.trial
        if step.answer.stop_train:
            break
    return answers
