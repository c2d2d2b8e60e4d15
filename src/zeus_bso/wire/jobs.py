"""A job on the wire: its options, its GPUs, its hardware profile and the settings it may change."""

from __future__ import annotations

import difflib
import hashlib
from collections import Counter
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from zeus_bso.wire.values import (
    _INT64_MAX,
    JOB_ID_SUFFIX_LENGTH,
    MAX_BATCH_SIZES,
    MAX_ID_LENGTH,
    MAX_POWER_W,
    NOT_UPSTREAM,
    BanditName,
    FiniteFloat,
    Identifier,
    NonNegativeFinite,
    NonNegativeInt,
    PolicyOption,
    PositiveFinite,
    PositiveInt,
    Printable,
    WireModel,
    batch_sizes_in,
)


class _JobOptions(WireModel):
    """Every job parameter except the id (shared by `JobParams` and `JobSpec`).

    Each field's docstring is its description (in the OpenAPI schema and the documentation's
    policy options page, both generated from here)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, use_attribute_docstrings=True)

    job_id_prefix: Annotated[
        str, Field(min_length=1, max_length=MAX_ID_LENGTH - JOB_ID_SUFFIX_LENGTH), Printable
    ]
    """The start of the job's id; a job without an id gets this and a hash of its options."""
    # Not Field(min_length=1): the default (when batch_size_range is given instead) would break
    # its own constraint, which tools that read the signature check (LightningCLI refused a
    # ZeusBSOCallback's job from its config); `_sorted_unique` refuses an empty list, and the
    # schema still says so.
    batch_sizes: Annotated[
        list[PositiveInt],
        Field(max_length=MAX_BATCH_SIZES, default_factory=list, json_schema_extra={"minItems": 1}),
    ]
    """The batch sizes to choose from (or give ``batch_size_range``, from which they are made)."""
    default_batch_size: PositiveInt
    """The batch size the job trains with today: the first to try, and the savings' reference."""
    batch_size_range: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None
    """Instead of ``batch_sizes``: ``[min, max]``, from which ``batch_sizes`` are made at
    registration by ``batch_size_steps`` (the default batch size is added if the steps miss it).
    Upstream clients see the batch sizes alone."""
    batch_size_steps: Literal["pow2", "pow2_half"] = "pow2"
    """The sizes ``batch_size_range`` makes: ``pow2``, the powers of two in it; ``pow2_half``,
    those and the sizes 1.5x between them (24, 48, 96, ...)."""
    eta_knob: Annotated[float, Field(ge=0.0, le=1.0), PolicyOption()] = 0.5
    """The cost's weight of energy against time: ``eta * energy + (1 - eta) * max_power *
    time``."""
    beta_knob: Annotated[PositiveFinite | None, PolicyOption()] = 2.0
    """Stop a run once its cost passes this many times the reference cost
    (``early_stop_reference``); ``None``: never stop early. More than 1 for a new job: at 1 or
    below, runs that cost no more than the reference would be stopped before they converge."""
    target_metric: FiniteFloat = 0.5
    """The validation metric a run must reach to converge."""
    higher_is_better_metric: bool = True
    """Whether a higher metric is better (accuracy) or a lower one (loss)."""
    max_epochs: PositiveInt = 100
    """Epochs a run may train before it counts as not converging."""
    num_pruning_rounds: Annotated[int, Field(ge=0, le=100), PolicyOption(upstream=2)] = 1
    """Pruning rounds before the bandit."""
    window_size: Annotated[NonNegativeInt, PolicyOption()] = 0
    """The bandit's window: the latest this many costs of each arm (0: all)."""
    mab_prior_mean: Annotated[FiniteFloat, PolicyOption()] = 0.0
    """The mean of the prior over an arm's mean reward (the negative cost)."""
    mab_prior_precision: Annotated[NonNegativeFinite, PolicyOption()] = 0.0
    """The precision of that prior (0: uninformative)."""
    mab_num_explorations: Annotated[int, Field(ge=0, le=1000), PolicyOption(upstream=2)] = 1
    """Observations an arm needs before Thompson sampling."""
    mab_seed: Annotated[int, Field(ge=-_INT64_MAX, le=_INT64_MAX)] | None = None
    """Makes the bandit's draws reproducible: trial *n*'s depends only on the seed and *n*."""

    # Options of ours (not in upstream), and the defaults of num_pruning_rounds (upstream: 2) and
    # mab_num_explorations (upstream: 2) above: chosen on the trace benchmark. Each policy option
    # says in its PolicyOption what reproduces upstream's decisions (`UPSTREAM_OPTIONS`) and how
    # job ids hash it. Upstream clients send every JobParams field, so they keep their 2 and 2.
    max_unreported_failures: Annotated[int, Field(ge=1, le=1000), PolicyOption()] = 3
    """Dispatches of one batch size in one pruning round that may end without any report (a
    crash its client caught, or an OOM kill or lost node whose lease ran out before the first
    report) before the batch size counts as not converging in that round."""
    prune_up_first: Annotated[
        bool, PolicyOption(upstream=False, flag="--prune-up-first/--prune-down-first")
    ] = True
    """Explore larger batch sizes before smaller ones in each pruning round."""
    prune_skip_other_direction: Annotated[
        bool,
        PolicyOption(upstream=False, flag="--prune-skip-other-direction/--prune-both-directions"),
    ] = True
    """Skip a round's second direction when the first one found a batch size cheaper than the
    pivot (cost is roughly unimodal in the batch size)."""
    prune_cost_ratio: Annotated[
        Annotated[float, Field(gt=1.0, allow_inf_nan=False)] | None, PolicyOption(upstream=None)
    ] = 1.5
    """Stop a pruning direction at a converged batch size costing more than this times the
    round's cheapest, and drop it (``None``: stop only at a batch size that did not converge)."""
    bandit: Annotated[BanditName, PolicyOption(upstream="zeus-0.16", hashed_off_default=True)] = (
        "thompson"
    )
    """The bandit stage's algorithm (`zeus_bso.policy.bandits`): ``thompson``, Gaussian Thompson
    sampling with the ``bandit_*`` settings below; ``zeus-0.16``, upstream Zeus 0.16's Thompson
    sampling (each arm's own variance, never exploiting: the ``bandit_*`` settings do not
    apply); ``ucb``, the lowest confidence bound on cost; or the name of one installed on the
    server (an entry point of the ``zeus_bso.bandits`` group)."""
    bandit_noise: Annotated[Literal["per_arm", "pooled"], PolicyOption()] = "pooled"
    """``per_arm``: each arm's reward precision is 1 / its own sample variance. ``pooled``: one
    coefficient of variation, estimated from every arm, scales every arm's noise (``thompson``
    only)."""
    bandit_exploit_after: Annotated[int | None, Field(ge=0, le=1_000_000), PolicyOption()] = 5
    """After this many bandit-stage trials, choose the arm with the lowest optimistic cost
    (``bandit_exploit_optimism``) instead of sampling (``None``: always sample; ``thompson``
    only). A job whose trusted prior (``prior_mode="trust"``) held through its walk counts 3
    trials more (`zeus_bso.policy.priors.TRUSTED_PULLS`)."""
    bandit_exploit_optimism: Annotated[
        float,
        Field(ge=0.0, le=10.0, allow_inf_nan=False),
        PolicyOption(hashed_off_default=True),
    ] = 0.5
    """Once exploiting, an arm's optimistic cost is its posterior mean cost less this many
    posterior standard deviations (the job's noise model): an arm seen once, unluckily, gets a
    second run when it could still be the cheapest. 0: the lowest mean cost (``thompson``
    only)."""
    early_stop_reference: Annotated[
        Literal["best_run", "best_mean"], PolicyOption(upstream="best_run")
    ] = "best_mean"
    """What ``beta_knob`` multiplies: ``best_mean``, the lowest mean cost of a batch size's
    converged runs; ``best_run``, the cheapest converged run (upstream), which one lucky run
    sets on a loaded or shared machine (`benchmarks/regret.py --loaded`). A job may change it
    by registering again (`STOP_SETTINGS`)."""
    early_stop_predictive: Annotated[bool, PolicyOption(upstream=False)] = False
    """Stop before an epoch that would take the run over the early-stop bound (the cost of an
    epoch is known after the first)."""
    learning_curve_stop: Annotated[bool, PolicyOption(upstream=False, hashed_off_default=True)] = (
        True
    )
    """Also stop a run whose learning curve predicts it will end over the early-stop bound: its
    cost so far plus its cost per epoch times the epochs it still needs, predicted from the
    latest converged runs of its batch size, or of the other ones for a batch size's first
    runs (see `zeus_bso.policy.curves`). With it, a run whose epochs cost more than its batch
    size's converged runs' did (a loaded machine) is judged against the early-stop reference
    taken at its pace, up to twice (`zeus_bso.policy.cost.run_load`)."""
    stop_on_cost_to_go: Annotated[
        bool,
        PolicyOption(
            upstream=False,
            hashed_off_default=True,
            flag="--stop-on-cost-to-go/--stop-on-total-cost",
        ),
    ] = True
    """With a learning-curve prediction, let a run predicted over the early-stop bound go on
    while what it still has to pay is no more than a fresh run at the cheapest batch size, up
    to ``beta_knob`` times the reference (stopping it would cost the recurrence a whole run
    more); ``False``: stop it at the prediction."""
    prune_stride: Annotated[
        int, Field(ge=1, le=8), PolicyOption(upstream=1, hashed_off_default=True)
    ] = 2
    """Pruning walks each direction in steps of this many batch sizes (the farthest one
    included), then tries the skipped neighbours of the round's cheapest until it has none
    untried: fewer full runs at sizes far from the cheapest. 1: every batch size in turn."""
    profile_probe: Annotated[bool, PolicyOption(upstream=False, hashed_off_default=True)] = True
    """On GPUs new to the job, the run after the first there (once that one has reported) takes
    the arm nearest the first's (in log batch size): a second measured cost ratio says whether
    the new GPUs reorder the batch sizes, which converted costs alone cannot
    (`zeus_bso.policy.profiles.probe_arm`). From then on, while the arm cheapest there has a
    neighbour among the batch sizes that is no arm, one run explores it there, and it joins the
    arms if it converges (`zeus_bso.policy.profiles.extension`): the cheapest batch size on the
    new GPUs may be one that pruning on the first never kept. ``False``: the bandit alone
    chooses among the arms."""
    max_run_cost_ratio: Annotated[
        Annotated[float, Field(gt=1.0, le=100.0, allow_inf_nan=False)] | None,
        PolicyOption(hashed_off_default=True),
    ] = None
    """A per-run safety cap: no run at a batch size other than the default may cost more than
    this many times the default's measured cost (the mean of its converged runs; no cap before
    one converged): a run stops before an epoch that would take it over (its epoch's cost known
    from its first). Pinned runs and the last attempt of ``until_converged`` are not capped.
    ``None``: no cap (``beta_knob`` still bounds runs against the cheapest). A job may change
    it by registering again (`STOP_SETTINGS`)."""
    expected_recurrences: Annotated[
        int | None, Field(ge=1, le=1_000_000), PolicyOption(hashed_off_default=True)
    ] = None
    """How many times the job will run (a job re-configured every few runs): it explores only
    what can pay back within them, planning to spend over them at most 3% more than always
    running the default would; an exploration that never converges is lost whole, which can
    take the job up to about one run at its cheapest batch size past that
    (`zeus_bso.policy.horizon`). A job that ran that many times is expected to run as many
    again. ``None``: the job runs indefinitely. A job may change it by registering again
    (`STOP_SETTINGS`)."""
    power_profiling: Annotated[
        bool,
        PolicyOption(hashed_off_default=True, flag="--power-profiling/--no-power-profiling"),
    ] = True
    """Runs that opt into power limits (the client's ``power_limit="optimize"``) profile the
    GPU's power limits in the first epoch of a batch size new to their hardware profile, once,
    and train at the limit whose epoch costs least (never with ``eta_knob`` 0, where the
    maximum is cheapest). ``False``: this job's runs train at the GPUs' own limits."""
    power_max_slowdown: Annotated[
        Annotated[float, Field(ge=1.0, le=100.0, allow_inf_nan=False)] | None,
        PolicyOption(hashed_off_default=True),
    ] = None
    """With power limits: runs train at the cheapest limit whose epoch takes at most this many
    times the epoch at the highest limit profiled (1.1: at most 10% slower; upstream Zeus's
    ``MaxSlowdownConstraint``). ``None``: the cheapest limit, however much slower."""
    lr_rule: Literal["linear", "sqrt", "auto"] | None = None
    """How the runs' learning rate follows the batch size (`zeus_bso.scaling.LrRule`): the
    client sends the ``lr_rule`` its run trains with (or takes it from here). Part of the job's
    history: a batch size's costs at one rule say little of it at another, so runs that switch
    rules are another job (a job id made from the settings includes it; a fixed ``job_id``
    registered with another rule is refused, 409). ``None``: the rate as the script gives it
    (``lr_rule="none"``, and upstream clients)."""
    prior_from: Identifier | None = None
    """A new job starts from what a related job learned: that job's id (on the same server), or
    ``auto``: the job of the same ``job_id_prefix`` updated last that has a converged run (in
    ``check`` mode only: ``trust`` with ``auto`` is refused; none: the job starts cold). The
    server copies the parent's curve at registration (`zeus_bso.policy.priors`); a job that
    exists keeps what it learned, whatever this says (`SEED_SETTINGS`). ``None``: no prior."""
    prior_mode: Literal["check", "trust"] = "check"
    """How far a job seeded by ``prior_from`` trusts it: ``check``, the default runs first and
    its cost of an epoch and epochs to converge are held against the parent's; ``trust`` (a
    declared parent: the same model and data pipeline, new data or a new target), the
    parent's best batch size runs first (where the parent converged at two sizes or more; one
    says nothing of which size is cheaper, and the default runs first), and trains to the
    target or ``max_epochs`` as a cold job's first run at the default does, but stops past 6x
    what the parent's runs at that size cost (a parent that is not the same model runs it at a
    size no measurement chose). Either way the prior is dropped as soon as a run disagrees with
    it, and the job goes on as a cold one reusing every run (a run stopped on the parent's word
    alone, its cost of an epoch more than 2x from the parent's either way, or past that bound,
    says nothing of its size: it is explored again). ``trust`` without ``prior_from`` is
    refused (there is no parent to trust)."""

    @model_validator(mode="before")
    @classmethod
    def _sizes_from_the_range(cls, data: Any) -> Any:
        """``batch_sizes`` made from ``batch_size_range``, when it is given instead."""
        if not isinstance(data, dict):
            return data
        if data.get("batch_size_range") is None:
            if not data.get("batch_sizes") and "batch_sizes" not in data:
                raise ValueError("give batch_sizes, or batch_size_range to make them from")
            return data
        sizes = batch_sizes_in(data["batch_size_range"], data.get("batch_size_steps", "pow2"))
        default = data.get("default_batch_size")
        if isinstance(default, int) and default not in sizes:
            sizes = sorted([*sizes, default])
        given = data.get("batch_sizes")
        if given:  # a registered job's config holds both, alike
            if not isinstance(given, list) or not all(type(b) is int for b in given):
                return data  # the field's own validation says what is wrong
            if sorted(given) != sizes:
                raise ValueError(
                    f"give batch_sizes or batch_size_range, not both: the range makes {sizes}, "
                    f"batch_sizes lists {sorted(given)}"
                )
        return {**data, "batch_sizes": sizes}

    @field_validator("batch_sizes")
    @classmethod
    def _sorted_unique(cls, batch_sizes: list[int]) -> list[int]:
        if not batch_sizes:
            raise ValueError("batch_sizes is empty: list at least one, or give batch_size_range")
        duplicates = sorted(b for b, n in Counter(batch_sizes).items() if n > 1)
        if duplicates:
            raise ValueError(f"batch_sizes lists {duplicates} more than once; list each once")
        return sorted(batch_sizes)

    @model_validator(mode="after")
    def _default_is_offered(self) -> Self:
        if self.default_batch_size not in self.batch_sizes:
            raise ValueError(
                f"default_batch_size {self.default_batch_size} is not one of batch_sizes "
                f"{self.batch_sizes}"
            )
        return self


class JobParams(_JobOptions):
    """A job's parameters, with its id."""

    job_id: Identifier


_NAMES_ELSEWHERE = {
    "eta": "eta_knob",  # the cost formula's and the Zeus paper's name
    "beta": "beta_knob",
    "target": "target_metric",
    "metric_target": "target_metric",
    "epochs": "max_epochs",
    "num_epochs": "max_epochs",
    "higher_is_better": "higher_is_better_metric",
    "seed": "mab_seed",
}
"""Names a job's fields go by in the cost formula, the paper and other tools, which a close
spelling alone would not suggest."""


class JobSpec(_JobOptions):
    """What a user specifies for a job. Without ``job_id`` the server makes one from the prefix.

    A field it does not have is refused, naming the nearest one (the server's wire model,
    `JobSpecFromClient`, keeps ignoring what upstream clients send)."""

    job_id: Identifier | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        if cls is not JobSpec or not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        unknown = sorted(str(name) for name in data if name not in known)
        if unknown:
            hints = []
            for name in unknown:
                near = [_NAMES_ELSEWHERE[name]] if name in _NAMES_ELSEWHERE else []
                near = near or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
            raise ValueError(
                f"JobSpec has no field {', '.join(hints)}; its fields are on the policy options "
                "page, and job_id, job_id_prefix, batch_sizes, default_batch_size, "
                "target_metric and max_epochs"
            )
        return data

    @model_validator(mode="after")
    def _id_has_prefix(self) -> Self:
        if self.job_id is not None and not self.job_id.startswith(self.job_id_prefix):
            raise ValueError(
                f"job_id {self.job_id!r} does not start with job_id_prefix {self.job_id_prefix!r}"
            )
        return self

    @model_validator(mode="after")
    def _makes_a_new_job(self) -> Self:
        # The user's spec; the server's wire model takes it, and refuses it for a new job alone
        # (a job that exists keeps what it learned, whatever its settings say).
        if type(self) is JobSpec and (refused := new_job_refused(self)) is not None:
            raise ValueError(refused)
        return self


def new_job_refused(spec: JobSpec) -> str | None:
    """Why ``spec`` cannot make a new job, in words that say what to change (None: it can):
    its ``beta_knob`` (`early_stop_refused`) or its seed settings (`_seed_refused`)."""
    return early_stop_refused(spec.beta_knob) or _seed_refused(spec)


def early_stop_refused(beta_knob: float | None) -> str | None:
    """Why ``beta_knob`` cannot bound a new job's runs (None: it can). At 1 or below, a run
    that costs no more than the early-stop reference itself is stopped, unconverged: at 1 about
    half the runs of the cheapest batch size when the reference is their mean, below 1 all of
    them, and every recurrence pays for runs that never deliver a model (in the simulator,
    cifar100 on the V100 cost 1.78 times the oracle at 50 recurrences with 1.0, 20 times with
    0.5, against 1.04 with 2.0)."""
    if beta_knob is None or beta_knob > 1:
        return None
    return (
        f"beta_knob={beta_knob:g} would stop runs that cost no more than the early-stop "
        "reference (early_stop_reference: the cheapest batch size's mean cost, or its cheapest "
        "run) before they converge, so runs at the best batch size would end without a model: "
        "give more than 1 (2.0, the default, stops a run once it costs twice the reference), "
        "or None to never stop early"
    )


def _seed_refused(spec: JobSpec) -> str | None:
    """Why ``spec``'s seed settings cannot seed a new job (None: they can):
    ``prior_mode="trust"`` trusts a declared parent, so it needs ``prior_from`` to name one;
    ``prior_from="auto"`` finds the last job of the prefix, not a declared parent, so it seeds
    in check mode only."""
    if spec.prior_mode != "trust":
        return None
    if spec.prior_from is None:
        return (
            "prior_mode='trust' trusts the job that prior_from names, and prior_from is not "
            "set: give the parent job's id as prior_from, or leave prior_mode out"
        )
    if spec.prior_from == "auto":
        return (
            "prior_from='auto' seeds in check mode only (the last job of the prefix is not a "
            "declared parent): name the parent job's id for prior_mode='trust', or leave "
            "prior_mode at 'check'"
        )
    return None


class GpuConfig(WireModel):
    """The GPUs a job trains on."""

    max_power: Annotated[float, Field(gt=0, le=MAX_POWER_W, allow_inf_nan=False)]
    """Sum of the maximum power limits of the GPUs used (W)."""
    number_of_gpus: PositiveInt
    gpu_model: Identifier


ESTIMATED_MODEL = "estimate"
"""The model a run names when it measured no device (`zeus_bso.energy.EstimateMeter`: energy
is its time x a fixed power): its hardware profile is a machine, not a GPU."""


def hardware_words(number_of_gpus: int, gpu_model: str, max_power: float) -> str:
    """A hardware profile for a person: ``8 x NVIDIA H200, 5600 W``, or, where its runs measured
    nothing, ``an unmetered machine (energy estimated at 300 W)``: never a GPU that is not one."""
    if gpu_model == ESTIMATED_MODEL:
        return f"an unmetered machine (energy estimated at {max_power:g} W)"
    return f"{number_of_gpus} x {gpu_model}, {max_power:g} W"


def profile_words(key: str) -> str:
    """`profile_key`'s key for a person: the key itself, or for runs that measured nothing
    `hardware_words`' machine (the key is the same: a job's profiles stay as they were)."""
    count, _, rest = key.partition("x")
    model, _, power = rest.rpartition("@")
    if model != ESTIMATED_MODEL or not count.isdigit() or not power.endswith("W"):
        return key
    try:
        return hardware_words(int(count), model, float(power[:-1]))
    except ValueError:
        return key


def profile_key(gpu: GpuConfig) -> str:
    """The name of a hardware profile, e.g. ``1xV100@250W``: GPU count, model and the sum of
    their power limits. Runs on one profile cost alike per epoch; across profiles they do not.

    At most `MAX_ID_LENGTH` characters, as ids (a trial stores its profile's name): past that,
    the model is shortened and a hash of the whole name keeps names of different profiles
    apart."""
    key = f"{gpu.number_of_gpus}x{gpu.gpu_model}@{gpu.max_power:g}W"
    if len(key) <= MAX_ID_LENGTH:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    tail = f"~{digest}@{gpu.max_power:g}W"
    head = f"{gpu.number_of_gpus}x{gpu.gpu_model}"
    return head[: MAX_ID_LENGTH - len(tail)] + tail


GPU_FIELDS = ("max_power", "number_of_gpus", "gpu_model")
"""The fields of `GpuConfig`: those a job may change between runs (its hardware profile)."""

POWER_SETTINGS = ("power_profiling", "power_max_slowdown")
"""How a job's runs use the GPUs' power limits: what it learned of its batch sizes holds
whatever limit its runs train at (`ADJUSTABLE_SETTINGS`)."""

STOP_SETTINGS = ("early_stop_reference", "max_run_cost_ratio", "expected_recurrences")
"""What a job's runs are stopped against besides its target and ``max_epochs``, and how long it
expects to run: what it learned of its batch sizes holds whatever they are
(`ADJUSTABLE_SETTINGS`); a platform adds a per-run cap, or a new horizon, to the jobs it runs
without their starting over."""

SEED_SETTINGS = ("prior_from", "prior_mode")
"""Where a new job's prior comes from: read when the job is created, and not part of what it is
(a job id made from the settings leaves them out; registering a job that exists with others
changes nothing)."""

ADJUSTABLE_SETTINGS = (*POWER_SETTINGS, *STOP_SETTINGS)
"""Settings a job may change by registering again, as its GPUs, and which do not make it another
job (a job id made from the settings leaves them out, `zeus_bso.client.job_ids`)."""


def differing_settings(one: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The settings whose values differ between two jobs' configurations (as JSON: a spec's
    ``model_dump(mode="json")``, or a registered job's), in the order of the job's fields: not
    the id, the prefix, the GPUs (another hardware profile of the same job) or the settings a
    job may change (`ADJUSTABLE_SETTINGS`: the same job at other limits or stop settings). Where
    both give ``batch_size_range``, their batch sizes are made from it, which is compared
    instead; a setting one of them lacks (an older configuration) is not compared."""
    skipped = {"job_id_prefix", *ADJUSTABLE_SETTINGS, *SEED_SETTINGS}  # nor the id nor GPUs
    if one.get("batch_size_range") is not None and other.get("batch_size_range") is not None:
        skipped.add("batch_sizes")
    return [
        name
        for name in _JobOptions.model_fields
        if name not in skipped and name in one and name in other and one[name] != other[name]
    ]


def gpu_of(job: GpuConfig) -> GpuConfig:
    """The `GpuConfig` part of a job (or of any model with its fields)."""
    return GpuConfig(**{name: getattr(job, name) for name in GPU_FIELDS})


class JobSpecFromClient(JobSpec, GpuConfig):
    """Request and response body of ``POST /jobs``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id_prefix": "resnet50-imagenet",
                    "batch_sizes": [64, 128, 256, 512, 1024],
                    "default_batch_size": 256,
                    "target_metric": 0.75,
                    "max_epochs": 90,
                    "eta_knob": 0.5,
                    "beta_knob": 2.0,
                    "max_power": 2800.0,
                    "number_of_gpus": 4,
                    "gpu_model": "NVIDIA-A100-SXM4-40GB",
                }
            ]
        }
    )


class CreatedJob(JobParams, GpuConfig):
    """A registered job: its id is always set."""


def policy_options() -> dict[str, PolicyOption]:
    """Every policy option of a job, by field name, in declaration order."""
    found: dict[str, PolicyOption] = {}
    for name, info in _JobOptions.model_fields.items():
        for marker in info.metadata:
            if isinstance(marker, PolicyOption):
                found[name] = marker
    return found


UPSTREAM_OPTIONS: dict[str, Any] = {
    name: option.upstream
    for name, option in policy_options().items()
    if option.upstream is not NOT_UPSTREAM
}
"""Our options set to upstream Zeus 0.16's behaviour."""
