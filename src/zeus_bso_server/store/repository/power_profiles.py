"""SQL of a job's power profiles: each batch size's measurements at each power limit, by
hardware profile."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import (
    delete,
    insert,
    select,
)
from sqlalchemy.engine import Connection

from zeus_bso.policy import (
    JobState,
)
from zeus_bso.policy.power import trained_limit
from zeus_bso.spec import CreatedJob, PowerMeasurement, PowerProfileView
from zeus_bso_server.store.repository.rows import Record, power_profiles


@dataclass(frozen=True, slots=True)
class StoredPowerProfile:
    """A batch size's power profile on a hardware profile, and the trial that measured it."""

    profile: str
    batch_size: int
    trial_number: int
    measurements: tuple[PowerMeasurement, ...]

    def view(self, job: CreatedJob, state: JobState) -> PowerProfileView:
        """The profile as the API shows it, with the limit its runs train at
        (`zeus_bso.policy.power.trained_limit`, at ``job``'s cost and ``state``'s profiles)."""
        return PowerProfileView(
            profile=self.profile,
            batch_size=self.batch_size,
            power_limit=trained_limit(job, state, self.profile, self.measurements),
            measurements=list(self.measurements),
            trial_number=self.trial_number,
        )


def _power_profiles(rows: Iterable[Record]) -> list[StoredPowerProfile]:
    grouped: dict[tuple[str, int], list[Record]] = {}
    for row in rows:
        grouped.setdefault((row.profile, row.batch_size), []).append(row)
    return [
        StoredPowerProfile(
            profile,
            batch_size,
            limits[0].trial_number,
            tuple(
                PowerMeasurement(
                    power_limit=r.power_limit,
                    time_per_epoch=r.time_per_epoch,
                    energy_per_epoch=r.energy_per_epoch,
                )
                for r in sorted(limits, key=lambda r: r.power_limit)
            ),
        )
        for (profile, batch_size), limits in sorted(grouped.items())
    ]


def power_profile(
    conn: Connection, job_id: str, profile: str, batch_size: int
) -> StoredPowerProfile | None:
    """The power profile of ``batch_size`` on ``profile``, if a run measured it."""
    rows = conn.execute(
        select(power_profiles).where(
            power_profiles.c.job_id == job_id,
            power_profiles.c.profile == profile,
            power_profiles.c.batch_size == batch_size,
        )
    ).all()
    found = _power_profiles(rows)
    return found[0] if found else None


def power_profiles_of(conn: Connection, job_id: str) -> list[StoredPowerProfile]:
    """Every power profile of the job, by hardware profile and batch size."""
    rows = conn.execute(select(power_profiles).where(power_profiles.c.job_id == job_id)).all()
    return _power_profiles(rows)


def delete_power_profiles(
    conn: Connection, job_id: str, profile: str | None, batch_size: int | None
) -> list[tuple[str, int]]:
    """Delete the job's power profiles on ``profile`` of ``batch_size`` (None: any); returns
    the (hardware profile, batch size) pairs deleted."""
    where = [power_profiles.c.job_id == job_id]
    if profile is not None:
        where.append(power_profiles.c.profile == profile)
    if batch_size is not None:
        where.append(power_profiles.c.batch_size == batch_size)
    found = conn.execute(
        select(power_profiles.c.profile, power_profiles.c.batch_size).where(*where).distinct()
    ).all()
    conn.execute(delete(power_profiles).where(*where))
    return sorted((str(row.profile), int(row.batch_size)) for row in found)


def insert_power_profile(conn: Connection, job_id: str, stored: StoredPowerProfile) -> None:
    """Store a power profile (the caller, holding the job's lock, checked there is none)."""
    conn.execute(
        insert(power_profiles),
        [
            {
                "job_id": job_id,
                "profile": stored.profile,
                "batch_size": stored.batch_size,
                "trial_number": stored.trial_number,
                **m.model_dump(),
            }
            for m in stored.measurements
        ],
    )
