"""What the added read routes and the dashboard show of jobs: their response models (not part
of the upstream protocol), defined once for the server, which fills them
(`zeus_bso_server.queries`), and the client, which reads them (`zeus_bso.client.ServerClient`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from zeus_bso.wire.jobs import CreatedJob
from zeus_bso.wire.trials import PowerProfileView, TrialKind, TrialStatus


class Recommendation(BaseModel):
    """The batch size the optimizer would settle on now (`zeus_bso.policy.recommended`)."""

    batch_size: int
    expected_cost: float
    """Its posterior mean cost (bandit stage) or the mean cost of its converged runs (pruning)."""
    basis: Literal["posterior", "converged runs"]


class Savings(BaseModel):
    """What the job's delivered models cost against delivering as many at the default batch size.

    A model is delivered by a run that converged. The baseline is ``runs`` (the converged runs,
    at any batch size) times what a delivered model costs at the default: everything the
    default batch size's ended runs spent over the ``default_runs`` of them that converged.
    What was spent is every ended trial's measured energy and time, unconverged, failed and
    abandoned ones included. Negative: the job spent more than the default would have."""

    default_batch_size: int
    default_runs: int
    """The default batch size's converged runs."""
    runs: int
    """Converged runs of the job (delivered models), at any batch size."""
    ended_runs: int
    """Every ended run of the job, converged or not."""
    energy: float
    """Joules saved."""
    time: float
    """Seconds saved."""
    cost: float
    """Cost saved, in the job's cost unit (`zeus_bso.policy.zeus_cost`)."""
    fraction: float
    """``cost`` over the baseline's cost."""


class JobStage(StrEnum):
    """Where a job is, as a reader sees it: the policy's stage, ``pinned`` while every run gets
    the pinned batch size, or ``blocked`` when its next run would be refused (no batch size
    converged: see `NextRun.why`)."""

    PRUNING = "pruning"
    BANDIT = "bandit"
    BLOCKED = "blocked"
    PINNED = "pinned"


class JobSummary(BaseModel):
    """One line of the job list."""

    job_id: str
    job_id_prefix: str
    stage: JobStage
    """Where the job is, as the job view says it (`JobStage`)."""
    trials: int
    gpu_model: str
    number_of_gpus: int
    profiles: list[str]
    """The hardware profiles the job ran on (`zeus_bso.spec.profile_key`), the first first; the
    costs shown are in the units of the current one, the last registered (``gpu_model``...)."""
    best_batch_size: int | None
    """The batch size of the early-stop reference (the job's ``early_stop_reference``: the
    lowest mean of a size's converged runs, or the cheapest converged run), if any."""
    best_cost: float | None
    recommended: Recommendation | None
    savings_unknown: str | None = None
    """Why there is no savings figure (``savings`` is null), in words."""
    savings: Savings | None
    """None until a run of the default batch size and one other have reported."""
    not_learning: str | None = None
    """Why the job learns nothing now (`JobView.not_learning`; null: it learns)."""
    mixed_models: str | None = None
    """Why the job's costs mix models (`JobView.mixed_models`; null: one model)."""
    created_at: float
    updated_at: float


class BatchSizeView(BaseModel):
    """What the server knows of one batch size of a job."""

    batch_size: int
    is_arm: bool
    reports: int
    """Final reports of runs with this batch size (all time)."""
    converged: int
    mean_cost: float | None
    cost_std: float | None
    """The spread of its reports' costs (None: fewer than two reports, which have none)."""
    best_converged_cost: float | None
    observations: int
    """Observations the bandit uses (the last ``window_size`` reports with a window)."""
    posterior_mean_reward: float | None
    """Mean of the posterior over the mean reward (reward = -cost); arms only."""
    posterior_std: float | None
    """Its standard deviation (0: a single or constant observation; null: no information)."""


_CURVE_POINT = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": 2,
    "maxItems": 2,
    "description": "[epoch, metric]",
}
"""A learning curve's point in the schema: an array of two numbers rather than a tuple's
``prefixItems``, which schemathesis (4.32) rewrites into the older ``items`` list that OpenAPI
3.1 refuses, so that it stops testing (its issues #3842 and #4099)."""


class TrainedModel(BaseModel):
    """A model a job's runs on one hardware profile trained, known by its number of
    parameters and the precision it trained in."""

    profile: str | None
    """Their hardware profile (null: the job's first)."""
    parameters: int
    precision: str | None = None
    """As the runs' framework names it (null: not said)."""
    techniques: list[str] | None = None
    """The ways of training they used beside it (``activation_checkpointing``, ``compiled``;
    empty: none; null: not said)."""
    trials: int
    """The job's trials whose runs trained it."""
    first_trial: int
    last_trial: int


class TrialView(BaseModel):
    """One trial."""

    job_id: str
    trial_number: int
    batch_size: int
    kind: TrialKind
    round: int | None
    status: TrialStatus
    epochs: int | None
    time: float | None
    energy: float | None
    metric: float | None
    cost: float | None
    converged: bool | None
    message: str | None
    profile: str | None = None
    """The hardware profile the run trained on; null: the job's first."""
    curve: list[Annotated[tuple[int, float], WithJsonSchema(_CURVE_POINT)]] | None = None
    """Its learning curve: ``[epoch, metric]`` where its best metric improved (null: a trial
    from before the server stored curves)."""
    accumulation_steps: int | None = None
    """Micro-batches its run accumulated an optimizer step (null: one, or not said)."""
    must_deliver: bool = False
    """Whether its run had to deliver a model (the last attempt of a recurrence): judged by the
    target and max_epochs alone."""
    model_parameters: int | None = None
    """The parameters its run trained, as its reports said (null: not said)."""
    precision: str | None = None
    """The precision its run trained in, as its reports said (null: not said)."""
    techniques: list[str] | None = None
    """The ways of training its run used beside its model and precision (``TrainedModel``'s),
    as its reports said (null: not said)."""
    created_at: float
    updated_at: float
    lease_expires_at: float | None


class PinRequest(BaseModel):
    """What to pin a job to."""

    batch_size: Annotated[int, Field(gt=0)] | None = None
    """One of the job's batch sizes (null: the one recommended now)."""


class Pin(BaseModel):
    """A job's pin."""

    job_id: str
    batch_size: int
    """The batch size every run gets until the job is unpinned."""


class ForgottenPowerProfile(BaseModel):
    """One power profile forgotten."""

    profile: str
    """The hardware profile (GPU count, model and power), e.g. ``1xNVIDIA H200@700W``."""
    batch_size: int


class ForgottenMemoryCaps(BaseModel):
    """What a job forgot of memory: its caps (runs on those GPUs get every batch size again)
    and its doubts (the sizes that trained there are taken to fit again)."""

    job_id: str
    forgotten: dict[str, int]
    """By hardware profile, the cap forgotten (the smallest batch size that ran out there)."""
    forgotten_doubts: dict[str, int] = {}
    """By hardware profile, the doubt forgotten (the smallest batch size that ran out there
    although it had trained there, `zeus_bso.policy.JobState.memory_doubts`)."""


class ForgottenPowerProfiles(BaseModel):
    """The power profiles a job forgot: the next run at each of those batch sizes on those GPUs
    profiles its power limits again."""

    job_id: str
    forgotten: list[ForgottenPowerProfile]


class SettingDifference(BaseModel):
    """One setting in which another job of the prefix differs from this one."""

    name: str
    here: Any
    """This job's value."""
    there: Any
    """The other job's value."""


class SiblingJob(BaseModel):
    """Another job registered with the same ``job_id_prefix``: a changed setting makes a new
    job (the client's ids hash the settings), which learns from scratch."""

    job_id: str
    trials: int
    updated_at: float
    differences: list[SettingDifference]
    """The settings in which it differs (`zeus_bso.spec.differing_settings`)."""


class SeededFrom(BaseModel):
    """The related job's curve a job was seeded with (``prior_from``), and where it stands."""

    job_id: str | None
    """The job it was learned by."""
    mode: Literal["check", "trust"]
    standing: Literal["following", "over", "dropped"]
    """``following``: its runs follow the prior's walk; ``over``: the walk is over, and the
    bandit chooses among the sizes it found; ``dropped``: a run disagreed with the prior, and
    the job went on as a cold one, reusing every run."""
    best_batch_size: int | None
    """The size the prior puts cheapest among the job's."""


class HorizonView(BaseModel):
    """Where a job with ``expected_recurrences`` stands against its budget
    (`zeus_bso.policy.horizon`), in its current hardware profile's cost units (J)."""

    recurrences: int
    """Its ``expected_recurrences``."""
    expected: int
    """The recurrences it is now expected to run: ``recurrences``, or, once it ran that many,
    twice as many as it ran."""
    done: int
    """Its runs that converged."""
    spent: float
    """What its ended runs cost."""
    budget: float | None
    """What it may spend over ``expected``: 3% more than running the default that many times
    (its measured mean cost; before it converged, the cheapest size's or a related job's
    prediction). Null before a run converged: nothing is bounded yet."""
    allowance: float | None
    """What one more exploration may lose: the budget less what it spent and the runs left at
    its cheapest size. At or below 0, nothing more is explored. Null as ``budget``."""
    cheapest_cost: float | None
    """The cheapest batch size's mean converged cost (null: none converged)."""


class NextRun(BaseModel):
    """What the next run of the job will get, and why, as the policy decides it now."""

    batch_size: int | None
    """Its batch size; null when the bandit draws it among ``arms``, or when it is refused."""
    kind: TrialKind | None
    """Why it is dispatched (null: refused)."""
    arms: list[int] | None
    """The bandit's arms (bandit stage)."""
    refused: bool
    """Whether the next run is refused (409) until the job changes: the stage is ``blocked``."""
    why: str
    """The reason in words, with what to change when it is refused."""


class JobView(BaseModel):
    """A job's config, stage, per-batch-size statistics and posterior, best batch size, trials."""

    job: CreatedJob
    """Its configuration, with the GPUs registered last: the current hardware profile, in whose
    cost units every cost below but the trials' own is shown."""
    profiles: list[str] = []
    """The hardware profiles the job ran on, the first first (see `JobSummary.profiles`; empty
    from a server that predates them)."""
    stage: JobStage
    pinned: int | None = None
    """The batch size the job is pinned to (null: not pinned)."""
    memory_caps: dict[str, int] = {}
    """By hardware profile: the smallest batch size that ran out of memory there; no run on
    that profile gets it or a larger one (other profiles keep them)."""
    memory_doubts: dict[str, int] = {}
    """By hardware profile: the smallest batch size that ran out of memory there although it
    had trained there; a run of it or a larger one there is tried first, and one that runs out
    again sets the memory cap; a run at it or above that trains to its end clears it."""
    power_profiles: list[PowerProfileView] = []
    """By hardware profile and batch size: the power profile a run measured there, and the GPU
    power limit its runs train at (runs that opted into power limits)."""
    next_run: NextRun | None = None
    """What its next run on the current hardware profile will get, and why (null only from a
    server that predates it)."""
    siblings: list[SiblingJob] = []
    """Other jobs of its ``job_id_prefix`` (the last changed first, at most five), and the
    settings in which each differs from it."""
    seeded_from: SeededFrom | None = None
    """The related job it was seeded with (null: it started cold)."""
    horizon: HorizonView | None = None
    """Its budget, with ``expected_recurrences`` (null: the job set none)."""
    not_learning: str | None = None
    """Why the job learns nothing now, in words: its newest ended runs were released one after
    another (none counted against its batch size), with what the latest said (null: it
    learns)."""
    models: list[TrainedModel] = []
    """The models its runs trained, by hardware profile, number of parameters and precision,
    the first trained first (runs that did not say theirs are left out)."""
    mixed_models: str | None = None
    """Why the job's costs mix models, in words, and what to do: its runs on one hardware
    profile trained other models, of other sizes or in other precisions (null: one model on
    each, or runs that did not say)."""
    arms: list[int] | None
    """The bandit's arms (bandit stage; where pruning has just ended, the ones its next run
    draws from, which that run's dispatch sets)."""
    best_batch_size: int | None
    best_cost: float | None
    recommended: Recommendation | None
    savings_unknown: str | None = None
    """Why there is no savings figure (``savings`` is null), in words."""
    savings: Savings | None
    trial_count: int
    trials_by_status: dict[str, int]
    batch_sizes: list[BatchSizeView]
    trials: list[TrialView]
    """The most recent trials, newest first (see the ``limit`` and ``before`` parameters)."""
    created_at: float
    updated_at: float


class FleetSummary(BaseModel):
    """Every job's spending and savings together (those whose id starts with a prefix, if any).

    Energy and cost are joules (every job's cost is), so they add up across jobs."""

    jobs: int
    runs: int
    """Ended runs (reported, failed and abandoned)."""
    energy: float
    """Joules spent by ended runs."""
    time: float
    """Seconds spent by ended runs."""
    runs_in_flight: int = 0
    """Runs training now: their trials dispatched, their leases alive (a run that stopped
    without a word counts until its lease expires)."""
    jobs_with_savings: int
    """Jobs whose savings are known (a run of the default and one of another reported)."""
    jobs_saving: int = 0
    """Of those, the jobs whose cost saved is not negative (the others spent more than their
    default would have)."""
    energy_saved: float
    """Joules saved against running each of those jobs' default every time."""
    energy_saved_fraction: float
    """``energy_saved`` over those jobs' baseline energy."""
    cost_saved: float
    cost_saved_fraction: float
    jobs_not_learning: int = 0
    """Jobs that learn nothing now: their newest ended runs, three or more, were all released,
    none counted (`JobSummary.not_learning`; ``GET /api/jobs?not_learning=true`` lists them)."""
    jobs_mixing_models: int = 0
    """Jobs whose runs on one hardware profile trained other models (`JobSummary.mixed_models`:
    the job list marks them)."""
