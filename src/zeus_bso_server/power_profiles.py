"""Power profiles in the service: what a run that opted into power limits is told, and what it
sends (its trial's run, while it runs, at limits its GPUs take)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.errors import ReportMismatchError
from zeus_bso.policy import TrialStatus
from zeus_bso.policy.power import profiles_power
from zeus_bso.spec import (
    CreatedJob,
    DispatchedTrial,
    GpuConfig,
    PowerMeasurement,
    PowerProfileReport,
    PowerProfileView,
    profile_key,
)
from zeus_bso_server.errors import (
    PowerProfilingOffError,
)
from zeus_bso_server.registration import registered, stored_trial
from zeus_bso_server.store import repository as repo

logger = logging.getLogger(__name__)


PROFILE_SENDERS_ENDED = frozenset(
    {TrialStatus.REPORTED, TrialStatus.FAILED, TrialStatus.INFEASIBLE}
)
"""Trials whose run is over: a power profile from them is refused."""


def _same_measurements(
    stored: Sequence[PowerMeasurement], sent: Sequence[PowerMeasurement]
) -> bool:
    """Whether a profile sent again is the one stored (a retry), to a float column's
    precision."""
    if len(stored) != len(sent):
        return False
    return all(
        math.isclose(a, b, rel_tol=1e-5)
        for s, t in zip(stored, sent, strict=True)
        for a, b in (
            (s.power_limit, t.power_limit),
            (s.time_per_epoch, t.time_per_epoch),
            (s.energy_per_epoch, t.energy_per_epoch),
        )
    )


def with_power(
    conn: Connection,
    config: CreatedJob,
    state: policy.JobState,
    trial: DispatchedTrial,
    profile: str,
) -> DispatchedTrial:
    """``trial`` with what a run that opted into power limits is told: the limit of its
    batch size's power profile on ``profile``, or to profile the limits (none yet)."""
    if not profiles_power(config.eta_knob, config.power_profiling):
        return trial
    stored = repo.power_profile(conn, trial.job_id, profile, trial.batch_size)
    if stored is None:
        repo.set_dispatched_for(conn, trial.job_id, trial.trial_number, power_profiling=True)
        return trial.model_copy(update={"power_profiling": True})
    limit = stored.view(config, state).power_limit
    return trial.model_copy(update={"power_limit": limit})


def store_profile(conn: Connection, report: PowerProfileReport) -> PowerProfileView:
    """One power profile's unit of work (`BatchSizeService.power_profile`): stored unless
    its (hardware profile, batch size) has one, and the limit to train at answered."""
    job, config = registered(repo.get_job(conn, report.job_id, lock=True), report.job_id)
    trial = stored_trial(conn, report).trial
    if not profiles_power(config.eta_knob, config.power_profiling):
        raise PowerProfilingOffError(
            f"job {report.job_id} does not profile power limits ("
            + (
                "eta_knob is 0: time alone, where the maximum limit is cheapest"
                if config.eta_knob == 0
                else "power_profiling is false"
            )
            + "): its runs train at the GPUs' own limits"
        )
    profile = trial.profile or profile_key(config)
    known = config if profile_key(config) == profile else None
    check_profile_sender(trial, report, known)
    stored = repo.power_profile(conn, report.job_id, profile, trial.batch_size)
    if stored is not None and stored.trial_number == trial.trial_number:
        if not _same_measurements(stored.measurements, report.measurements):
            raise ReportMismatchError(
                f"trial {trial.trial_number} sent its power profile already, with other "
                "measurements: a run profiles once"
            )
    elif stored is None:
        stored = repo.StoredPowerProfile(
            profile, trial.batch_size, trial.trial_number, tuple(report.measurements)
        )
        repo.insert_power_profile(conn, report.job_id, stored)
    view = stored.view(config, job.state)
    logger.info(
        "job %s: batch size %d trains at %g W on %s",
        report.job_id,
        trial.batch_size,
        view.power_limit,
        profile,
    )
    return view


def check_profile_sender(
    trial: policy.TrialState, report: PowerProfileReport, gpus: GpuConfig | None
) -> None:
    """A profile comes from its trial's run, while it runs (a released trial may be resumed
    from a checkpoint), at limits its GPUs take (``gpus``: the trial's hardware profile,
    where known: no limit above its power, its GPUs' limits together; the run's own range
    is checked with the report, `PowerProfileReport.limit_range_w`).

    Raises:
        ReportMismatchError: the trial ended, its run was not told to profile power limits,
            or a limit is above its GPUs' power.
    """
    if trial.status in PROFILE_SENDERS_ENDED:
        raise ReportMismatchError(
            f"trial {trial.trial_number} ended ({trial.status.value}): a power profile "
            "comes from its run while it runs"
        )
    if trial.power_profiling is False:
        raise ReportMismatchError(
            f"trial {trial.trial_number}'s run was not told to profile power limits (its "
            "batch size's profile was known, or the run did not ask with power_limits=true): "
            "it trains at the limit it was told"
        )
    if gpus is None:
        return
    above = [m.power_limit for m in report.measurements if m.power_limit > gpus.max_power]
    if above:
        raise ReportMismatchError(
            f"power limits {above} W are above the {gpus.max_power:g} W of the trial's "
            f"hardware profile ({profile_key(gpus)}), its GPUs' limits together"
        )


def forget_profiles(
    conn: Connection, job_id: str, profile: str | None, batch_size: int | None
) -> list[tuple[str, int]]:
    """One forgetting's unit of work (`BatchSizeService.forget_power_profiles`)."""
    registered(repo.get_job(conn, job_id, lock=True), job_id)
    forgotten = repo.delete_power_profiles(conn, job_id, profile, batch_size)
    for key, size in forgotten:
        logger.info("job %s: the power profile of batch size %d on %s forgotten", job_id, size, key)
    return forgotten
