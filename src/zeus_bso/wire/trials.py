"""A trial on the wire: its dispatch, reports, power profiles and the server's answers."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from zeus_bso.wire.values import (
    MAX_ENERGY_J,
    MAX_MODEL_PARAMETERS,
    MAX_POWER_W,
    MAX_PRECISION_LENGTH,
    MAX_TIME_S,
    FiniteFloat,
    Identifier,
    NonNegativeInt,
    PositiveInt,
    Printable,
    WireModel,
)


class TrialKind(StrEnum):
    """Why a trial was dispatched."""

    EXPLORATION = "exploration"
    """A pruning-round run of a batch size (explorations are serial)."""
    CONCURRENT = "concurrent"
    """A run started while an exploration was in flight; it gets the best batch size so far."""
    BANDIT = "bandit"
    """A run chosen by Thompson sampling."""
    EXPLOIT = "exploit"
    """A run at the cheapest batch size so far while pruning waits: the recurrences a job
    expects (``expected_recurrences``) cannot pay back another exploration now
    (`zeus_bso.policy.horizon`)."""
    PINNED = "pinned"
    """A run of a pinned job: the pinned batch size, nothing explored; stopped only at its
    target or ``max_epochs`` (a run that must deliver a model)."""


class TrialStatus(StrEnum):
    """A trial's state. Only ``dispatched`` trials change state."""

    DISPATCHED = "dispatched"
    REPORTED = "reported"
    """The run ended with a final report: time, energy, cost and convergence are stored."""
    FAILED = "failed"
    """The client ended the trial without a final report (the run crashed or was stopped)."""
    ABANDONED = "abandoned"
    """The trial's lease expired: the client vanished. Says nothing about the batch size."""
    RELEASED = "released"
    """The client released the trial: the run ended for a reason that is not its batch size's
    (a misconfigured script; the framework's own epoch limit below the job's). Says nothing
    about the batch size, whose exploration is tried again."""
    INFEASIBLE = "infeasible"
    """The run ran out of accelerator memory at its batch size: neither that size nor a larger
    one fits on the trial's hardware profile (`zeus_bso.policy.JobState.memory_caps`). Says
    nothing about whether the size converges, and nothing about other profiles."""


class TrialId(WireModel):
    """Identifies one trial (one training run) of a job."""

    job_id: Identifier
    batch_size: PositiveInt
    trial_number: PositiveInt


MAX_ENDING_LENGTH = 1000
"""The most characters an `EndedTrial`'s ``message`` has (a client shortens a longer one)."""


class EndedTrial(TrialId):
    """``PATCH /trials`` (end a trial) and ``POST /api/trials/release``: a trial whose run
    ended, and, an extension upstream's server ignores, why in words, stored with the trial
    as its ``message`` (the dashboard's trials, ``zeus-bso jobs trials --format json``) where
    its run did not report its end."""

    message: Annotated[str, Field(max_length=MAX_ENDING_LENGTH), Printable] | None = None
    """Why the run ended (the run's outcome, e.g. ``OperationOrderError: call train_begin()
    before report()``)."""


class ReleasedTrial(EndedTrial):
    """``POST /api/trials/release``: a trial whose run ended for a reason that is not its batch
    size's, and why."""

    out_of_memory: bool = False
    """The run ran out of accelerator memory while it trained at a batch size that had trained
    on its GPUs (an extension older servers ignore): that size's fit is in doubt there, so the
    next run of it is tried first and a second error sets the GPUs' memory cap
    (`zeus_bso.policy.JobState.memory_doubts`)."""


class DispatchedTrial(TrialId):
    """The answer to ``GET /jobs/batch_size``: a trial, and (an extension upstream clients
    ignore) whether it is a restarted run's trial, resumed by its run key, with what that run
    already reported."""

    resumed: bool = False
    memory_unknown: bool = False
    """Whether no run of this batch size has reported on the run's hardware profile yet (an
    extension, answered to a request that names its GPUs, as zeus-bso's client does): a client
    tries a few steps first, and a batch size that runs out of memory is marked ``infeasible``
    before the run trains."""
    memory_cap: PositiveInt | None = None
    """The smallest batch size that ran out of memory on the run's hardware profile (an
    extension, answered to a request that names its GPUs): a run that accumulates gradients
    keeps its micro-batches below it."""
    power_limit: Annotated[float, Field(gt=0, le=MAX_POWER_W, allow_inf_nan=False)] | None = None
    """To a run that opted into power limits: the GPU power limit (W, each GPU's) to train at,
    from this batch size's power profile on the run's hardware profile (an extension)."""
    power_profiling: bool = False
    """To a run that opted into power limits: no power profile of this batch size on its
    hardware profile yet, so the run profiles the limits in its first epoch and sends them
    (``POST /api/trials/power_profile``) before it trains on (an extension)."""
    current_epoch: NonNegativeInt = 0
    time: Annotated[float, Field(ge=0, le=MAX_TIME_S, allow_inf_nan=False)] = 0.0
    energy: Annotated[float, Field(ge=0, le=MAX_ENERGY_J, allow_inf_nan=False)] = 0.0

    @property
    def trial(self) -> TrialId:
        """The trial alone."""
        return TrialId(
            job_id=self.job_id, batch_size=self.batch_size, trial_number=self.trial_number
        )


EXTENSIONS_HEADER = "Zeus-BSO-Extensions"
"""The header of a dispatch answer (``GET /jobs/batch_size``) in which a zeus-bso server declares
the protocol extensions it speaks (`Extension`, comma-separated); upstream Zeus's server sends
none. The body stays upstream's."""


class Extension(StrEnum):
    """A protocol extension a zeus-bso server declares (`EXTENSIONS_HEADER`)."""

    RUN_KEY = "run_key"
    """A restarted run gets its open trial back (``run_key``)."""
    MEMORY = "memory"
    """Whether a size ran on the run's GPUs, and their memory cap (``memory_unknown``)."""
    INFEASIBLE = "infeasible"
    """``POST /api/trials/infeasible``: a size, or a micro-batch, ran out of memory."""
    ACCUMULATE = "accumulate"
    """A run that accumulates gradients reaches sizes above its GPUs' memory cap."""
    POWER_LIMITS = "power_limits"
    """The server chooses each size's GPU power limit (``power_limits``; its profile)."""
    DELIVER = "deliver"
    """A run that must deliver a model is stopped only at the target or ``max_epochs``."""
    RELEASE = "release"
    """``POST /api/trials/release``: a trial that counts nothing against its size."""
    HEARTBEAT = "heartbeat"
    """``POST /api/trials/heartbeat``: a trial's lease renewed while it trains."""
    DIVERGED = "diverged"
    """A report may say that its training diverged (`TrainingResult.diverged`)."""


class Technique(StrEnum):
    """A way of training that changes what a run costs at a batch size, and what fits in memory,
    beside the model's size and precision (`TrainingResult.techniques`)."""

    ACTIVATION_CHECKPOINTING = "activation_checkpointing"
    """Activations recomputed in the backward pass (gradient checkpointing): less memory, more
    time a step."""
    COMPILED = "compiled"
    """The model compiled (``torch.compile``): less time a step, a compile's time first."""


def declared_extensions(header: str | None) -> frozenset[str]:
    """The extensions a dispatch answer's `EXTENSIONS_HEADER` declares (none: not declared)."""
    return frozenset(word.strip() for word in (header or "").split(",") if word.strip())


class TrainingResult(TrialId):
    """A report after one epoch. ``time`` and ``energy`` are cumulative since the run began."""

    time: Annotated[float, Field(ge=0, le=MAX_TIME_S, allow_inf_nan=False)]
    energy: Annotated[float, Field(ge=0, le=MAX_ENERGY_J, allow_inf_nan=False)]
    metric: FiniteFloat
    current_epoch: PositiveInt
    accumulation_steps: PositiveInt | None = None
    """An extension: the micro-batches the run accumulates an optimizer step (its batch size
    reached by gradient accumulation); absent: one."""
    final: bool | None = None
    """An extension: the run stops after this report of its own accord (a framework's early
    stopping ended it), so the server judges it as the run's last; unless it reached the target,
    the run did not converge at its batch size, and is charged as if it had trained the job's
    ``max_epochs`` (absent: the server decides when the run stops)."""
    message: Annotated[str, Field(max_length=MAX_ENDING_LENGTH), Printable] | None = None
    """An extension, with ``final``: why the run stopped of its own accord (``EarlyStopping
    ended it``, training diverged), which the server keeps in the trial's message."""
    model_parameters: Annotated[int, Field(gt=0, le=MAX_MODEL_PARAMETERS)] | None = None
    """An extension: the number of parameters the run trains (its optimizers', each counted
    once), which the trial keeps: a job whose runs trained models of other sizes says so (the
    answer's ``notice``, the job's view). A model FSDP's ``fully_shard`` shards counts whole.
    Absent: not said (a model sharded otherwise, whose parameters each process holds a part of:
    FSDP's flattened ones, DeepSpeed's ZeRO-3)."""
    precision: (
        Annotated[str, Field(min_length=1, max_length=MAX_PRECISION_LENGTH), Printable] | None
    ) = None
    """An extension, with ``model_parameters``: the numeric precision the run trains in, as
    its framework names it (Lightning's ``bf16-mixed``, the HF Trainer's ``bf16``), which the
    trial keeps: a job whose runs trained in other precisions says so as for other sizes.
    Absent: not said (a plain loop, whose precision is its own code's)."""
    techniques: Annotated[list[Technique], Field(max_length=len(Technique))] | None = None
    """An extension, with ``model_parameters``: the ways of training the run uses beside its
    model and precision (activation checkpointing, a compiled model), each of which changes
    what a batch size costs and what fits in memory; the trial keeps them: a job whose runs
    trained otherwise says so as for other models. Empty: none; absent: not said (a plain
    loop, or a client from before)."""
    diverged: bool | None = None
    """An extension: the run's training diverged (its metric was not a number) and it stops
    after this report, as a ``final`` one does (not converged at its batch size); ``metric``,
    a number only because the protocol asks for one, is not taken: the trial keeps its last."""


class InfeasibleTrial(TrialId):
    """``POST /api/trials/infeasible``: a trial whose run ran out of accelerator memory."""

    micro_batch_size: PositiveInt | None = None
    """For a run that accumulates gradients: the micro-batch that ran out of memory. The
    profile's memory cap comes down to it, and the trial goes on with smaller micro-batches
    (absent: the batch size ran out, and the trial is ``infeasible``). Taken after the trial
    ended too, where its run said it accumulates: a client delivers late what the server could
    not hear while it was away."""


class PowerMeasurement(WireModel):
    """One power limit's epoch, as a run measured it: its time and its energy (of all the run's
    GPUs, like a report's), extrapolated from the steps it profiled."""

    power_limit: Annotated[float, Field(gt=0, le=MAX_POWER_W, allow_inf_nan=False)]
    """The limit each GPU ran at (W)."""
    time_per_epoch: Annotated[float, Field(gt=0, le=MAX_TIME_S, allow_inf_nan=False)]
    energy_per_epoch: Annotated[float, Field(ge=0, le=MAX_ENERGY_J, allow_inf_nan=False)]


MAX_POWER_LIMITS = 64
"""Most power limits one profile measures."""


class PowerProfileReport(TrialId):
    """``POST /api/trials/power_profile``: what a run measured at each power limit in the first
    epoch of its batch size on its hardware profile."""

    measurements: Annotated[
        list[PowerMeasurement], Field(min_length=1, max_length=MAX_POWER_LIMITS)
    ]
    limit_range_w: (
        tuple[
            Annotated[float, Field(gt=0, le=MAX_POWER_W, allow_inf_nan=False)],
            Annotated[float, Field(gt=0, le=MAX_POWER_W, allow_inf_nan=False)],
        ]
        | None
    ) = None
    """The lowest and highest limit every GPU of the run takes (W): each measurement's limit
    lies within it (absent: a client that does not say)."""

    @field_validator("measurements")
    @classmethod
    def _one_per_limit(cls, measurements: list[PowerMeasurement]) -> list[PowerMeasurement]:
        limits = [m.power_limit for m in measurements]
        if len(set(limits)) != len(limits):
            raise ValueError(f"each power limit is measured once: {limits}")
        return sorted(measurements, key=lambda m: m.power_limit)

    @model_validator(mode="after")
    def _within_range(self) -> Self:
        if self.limit_range_w is None:
            return self
        low, high = self.limit_range_w
        if low > high:
            raise ValueError(f"limit_range_w {low:g}-{high:g} W: the lowest comes first")
        outside = [m.power_limit for m in self.measurements if not low <= m.power_limit <= high]
        if outside:
            raise ValueError(
                f"power limits {outside} W lie outside the GPUs' range, {low:g}-{high:g} W"
            )
        return self


class PowerProfileView(WireModel):
    """A batch size's power profile on one hardware profile, and the limit its runs train at."""

    profile: str
    batch_size: PositiveInt
    power_limit: float
    """The limit whose epoch costs least at the job's ``eta_knob`` (the highest on a tie), among
    those within the job's ``power_max_slowdown``."""
    measurements: list[PowerMeasurement]
    trial_number: PositiveInt
    """The trial whose run measured it."""


class StopReason(StrEnum):
    """Why a run stopped (or, for the last three, ended without the server's stop; a run without
    the server judges the first two itself)."""

    CONVERGED = "converged"
    """It reached the target metric."""
    MAX_EPOCHS = "max_epochs"
    """It trained the job's ``max_epochs`` without reaching the target."""
    COST_BOUND = "cost_bound"
    """Its cost (or its cost after one more epoch) passed the bound: ``beta_knob`` (or, while
    pruning, ``prune_cost_ratio``) times the cheapest converged run's, or the job's
    ``max_run_cost_ratio`` times the default's."""
    PREDICTED_COST = "predicted_cost"
    """Its learning curve predicts a cost at convergence past that bound."""
    ENDED_EARLY = "ended_early"
    """Training ended before the server said stop (e.g. the framework's own epoch limit)."""
    NOT_TRAINED = "not_trained"
    """The run failed before it trained (e.g. misconfigured): not counted against its batch
    size."""
    FAILED = "failed"
    """The run raised while training."""
    OUT_OF_MEMORY = "out_of_memory"
    """The run ran out of accelerator memory at its batch size: the size is ``infeasible`` on
    its hardware profile, and no run there gets it (or a larger one) again."""


class ReportResponse(WireModel):
    """The server's answer to a report."""

    stop_train: bool
    converged: bool
    message: str
    cost: float | None = None
    """The run's cost so far (J), as the server computes it (an addition to upstream's answer,
    which its clients ignore; absent from servers that predate it)."""
    reason: StopReason | None = None
    """Why the run stops (``null`` while it goes on, and from servers that predate it)."""
    why: str | None = None
    """The reason in words, with rounded figures, for a person (an addition, as ``reason``)."""
    notice: str | None = None
    """Something the run's user should know that changes nothing of the answer, in words (an
    addition, as ``reason``): the job's other runs trained models of other sizes."""
