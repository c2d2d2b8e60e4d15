"""Database tables. Times are seconds since the epoch by the database's clock (see `db_now`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from zeus_bso.spec import MAX_PRECISION_LENGTH as PRECISION_LENGTH
from zeus_bso_server.store.dialects import DIALECTS, column_type

TECHNIQUES_LENGTH = 64
"""The longest ``trials.techniques`` (every `zeus_bso.spec.Technique`, joined, fits)."""

ID_LENGTH = 255

REAL = column_type(Float(), "double_type")
"""Double precision everywhere: ``FLOAT`` is that on PostgreSQL and SQLite, single on MySQL."""
MESSAGE = column_type(Text(), "long_text_type")
"""Converting to utf8mb4 makes MySQL's ``TEXT`` a ``MEDIUMTEXT``, to hold as many characters."""


class db_now(FunctionElement[float]):  # noqa: N801 (reads as a SQL function)
    """The database's clock in seconds since the epoch, so every replica agrees on lease times."""

    type = Double()
    inherit_cache = True


@compiles(db_now)
def _db_now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return DIALECTS[compiler.dialect.name].now_sql


class Base(DeclarativeBase):
    """Declarative base of the schema."""


class JobRow(Base):
    """One registered job. Its row is the lock every request on the job takes."""

    __tablename__ = "jobs"

    job_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    job_id_prefix: Mapped[str] = mapped_column(String(ID_LENGTH), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    arms: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    bandit_start: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Number of the job's first bandit-stage trial."""
    next_trial_number: Mapped[int] = mapped_column(Integer, default=1)
    best_batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    best_cost: Mapped[float | None] = mapped_column(REAL, nullable=True)
    """The early-stop reference: the cost a run must not exceed (see `policy.best_reference`)."""
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, server_default="{}")
    """Running statistics of each batch size's reported runs, by batch size (see
    `zeus_bso.policy.BatchSizeStats`), updated with every final report. Kept on the row that every
    request locks, they come with the lock: a request's cost does not depend on how many
    trials the job has, and the statistics take no reads of their own."""
    profiles: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    """The hardware profiles (`GpuConfig`) the job ran on, the first first (see
    `zeus_bso.policy.JobState.profiles`); NULL while it knows one, the configuration's."""
    by_profile: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """A job with two or more profiles: its epochs and bandit trials by profile (see
    `zeus_bso.policy.ByProfile`), kept with every report; NULL before they were counted."""
    pinned_batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The batch size every run gets while the job is pinned; NULL: not pinned."""
    memory_caps: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    """By hardware profile: the smallest batch size that ran out of memory there (see
    `zeus_bso.policy.JobState.memory_caps`); NULL: none known."""
    memory_doubts: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    """By hardware profile: the smallest batch size that ran out of memory there although it
    had trained there (see `zeus_bso.policy.JobState.memory_doubts`); NULL: none."""
    prior: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The related job's curve the job was seeded with at registration (see
    `zeus_bso.policy.Prior`, ``prior_from``); NULL: none."""
    created_at: Mapped[float] = mapped_column(REAL, server_default=db_now())
    updated_at: Mapped[float] = mapped_column(REAL, server_default=db_now())


class TrialRow(Base):
    """One trial (training run). ``(job_id, trial_number)`` is unique: numbers never repeat."""

    __tablename__ = "trials"

    job_id: Mapped[str] = mapped_column(
        String(ID_LENGTH), ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    trial_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    batch_size: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    round: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(REAL, server_default=db_now())
    updated_at: Mapped[float] = mapped_column(REAL, server_default=db_now())
    lease_expires_at: Mapped[float | None] = mapped_column(REAL, nullable=True)
    epochs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    time: Mapped[float | None] = mapped_column(REAL, nullable=True)
    energy: Mapped[float | None] = mapped_column(REAL, nullable=True)
    metric: Mapped[float | None] = mapped_column(REAL, nullable=True)
    cost: Mapped[float | None] = mapped_column(REAL, nullable=True)
    converged: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    message: Mapped[str | None] = mapped_column(MESSAGE, nullable=True)
    run_key: Mapped[str | None] = mapped_column(String(ID_LENGTH), nullable=True)
    """The client's name for the run (the same across its restarts), if it gave one."""
    profile: Mapped[str | None] = mapped_column(String(ID_LENGTH), nullable=True)
    """The hardware profile the run trains on (`zeus_bso.spec.profile_key`); revision 0005 gave
    the trials from before their job's profile."""
    curve: Mapped[list[list[float]] | None] = mapped_column(JSON, nullable=True)
    """Its learning curve (`zeus_bso.policy.curves`); NULL for trials from before 0006."""
    accumulation_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Micro-batches its run accumulated a step (reported; NULL: one, or not said)."""
    accumulates: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    """Whether its run said, when dispatched or resumed, that it accumulates gradients (only
    such a run sends a micro-batch that ran out of memory); NULL for trials from before 0013."""
    power_profiling: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    """Whether its run was told to profile power limits (only such a run sends a power
    profile); NULL for trials from before 0013."""
    must_deliver: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    """Whether its run must deliver a model (no stop on its cost); NULL: no (before 0013)."""
    resumed_at_epoch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The epochs its run had reported when it last resumed; NULL: it never resumed (0015)."""
    model_parameters: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """The parameters its run trained, as its first report that said them counted them (their
    number is the model's size: a job whose runs trained other sizes mixes models); NULL: not
    said (upstream Zeus's clients, a model sharded by FSDP's flattening or ZeRO-3, trials from
    before 0016)."""
    precision: Mapped[str | None] = mapped_column(String(PRECISION_LENGTH), nullable=True)
    """The numeric precision its run trained in, as its framework names it (``bf16-mixed``),
    kept with ``model_parameters``; NULL: not said (a plain loop)."""
    techniques: Mapped[str | None] = mapped_column(String(TECHNIQUES_LENGTH), nullable=True)
    """The ways of training its run used beside its model and precision
    (`zeus_bso.spec.Technique`), sorted and joined by commas as its first report that said its
    model said them (empty: none); NULL: not said (trials from before 0018)."""

    __table_args__ = (
        Index("ix_trials_job_run_key", "job_id", "run_key"),
        Index("ix_trials_job_status", "job_id", "status"),
        Index("ix_trials_job_kind", "job_id", "kind"),
        Index("ix_trials_job_bs_status_number", "job_id", "batch_size", "status", "trial_number"),
    )


class PowerProfileRow(Base):
    """One power limit of a batch size's power profile on a hardware profile: its epoch as the
    run of ``trial_number`` measured it, in the first epoch of the size's first run there."""

    __tablename__ = "power_profiles"

    job_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    """Its job's (deleted with it, by `repository.delete_job`)."""
    profile: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    batch_size: Mapped[int] = mapped_column(Integer, primary_key=True)
    power_limit: Mapped[float] = mapped_column(REAL, primary_key=True)
    time_per_epoch: Mapped[float] = mapped_column(REAL)
    energy_per_epoch: Mapped[float] = mapped_column(REAL)
    trial_number: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(REAL, server_default=db_now())
