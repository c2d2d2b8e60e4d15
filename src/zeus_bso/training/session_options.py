"""`SessionOptions`: what an adapter passes on to `zeus_bso.training.TrialSession` unchanged,
each option as the session takes it (`RunOptions`, those every adapter takes as keywords), and
`checked_options`, which every adapter and the session check them with when they are built (no
network: a wrong option, or a misspelt one, is said before a model loads or a job is
registered)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Literal, TypedDict, TypeVar

from zeus_bso.energy import EnergyMeter
from zeus_bso.errors import ConfigurationError
from zeus_bso.options import (
    JobLike,
    check_max_micro_batch_size,
    check_metric_direction,
    job_lr_rule,
    required_job,
    server_url_from,
)
from zeus_bso.power.run import PowerLimitMode, check_power_limit
from zeus_bso.scaling.lr import LrRule
from zeus_bso.spec import JobSpec
from zeus_bso.training.trial_file import Resume


class RunOptions(TypedDict, total=False):
    """The options of a run that every adapter takes as keywords and passes on to the session
    (`SessionOptions` without ``resume``, which the Lightning and Hugging Face callbacks find
    in the framework's own checkpoints)."""

    energy_meter: EnergyMeter | None
    """How to measure energy in this process (default: `zeus_bso.energy.process_meter`: every
    visible GPU, or in a launch of several processes a node, the local rank's)."""
    token: str | None
    """The server's bearer token, if it has one (default: ``$ZEUS_BSO_TOKEN``, or the file
    ``$ZEUS_BSO_TOKEN_FILE`` names)."""
    on_server_unavailable: Literal["fallback", "raise"]
    """``"fallback"`` (train at the default batch size, or the last recommendation saved on
    this machine, when the server cannot be reached at start) or ``"raise"`` (raise
    `zeus_bso.errors.ServerConnectionError`)."""
    raise_if_unconverged: bool
    """`zeus_bso.errors.ZeusBSOTrainFailError` is raised on every process, once, when the run
    ends without reaching its target: from the report whose answer ends it, as upstream Zeus's
    ``on_evaluate`` does (for a framework whose callback does not raise at the end of the fit
    instead), or from the session's ``end``."""
    lr_rule: LrRule
    """How the learning rate follows the batch size (`zeus_bso.scaling.LrRule`), for the
    session's ``learning_rate`` and ``scale``."""
    reference_batch_size: int | None
    """The batch size the learning rate was tuned at (default: the job's
    ``default_batch_size``)."""
    max_micro_batch_size: int | None
    """Opts into gradient accumulation (see `zeus_bso.client.accumulation`): a batch size
    above it, or at or above the smallest that ran out of memory on these GPUs, is trained as
    ``accumulation_steps`` micro-batches of ``micro_batch_size`` on every process;
    micro-batches that run out of memory are lowered for the next run instead of the batch size
    becoming infeasible (None, the default: no accumulation)."""
    power_limit: PowerLimitMode
    """``"optimize"`` opts into GPU power limits (`zeus_bso.training.power`): a batch size's
    first run on these GPUs profiles the limits in its first steps (call the session's
    ``step_begin`` and ``step_end`` around every training step), and runs train at the limit
    the server chooses; each GPU's own limit is restored on every exit path. ``"off"``, the
    default: the limits are left alone."""


class SessionOptions(RunOptions, total=False):
    """The options of a run that adapters pass on to the session."""

    resume: Resume
    """What the session's ``checkpoint`` returned in an earlier, interrupted run of this trial,
    a function that reads it (called on the main process only), or the checkpoint directory
    where zeus-bso wrote it (`zeus_bso.training.trial_file.STATE_FILE`)."""


RUN_OPTIONS = RunOptions.__optional_keys__
"""The names of `RunOptions`."""
SESSION_OPTIONS = SessionOptions.__optional_keys__
"""The names of `SessionOptions`."""

_Options = TypeVar("_Options", RunOptions, SessionOptions)


def checked_options(
    options: _Options,
    job: JobSpec,
    known: frozenset[str] = SESSION_OPTIONS,
    takes: Callable[..., object] | None = None,
) -> _Options:
    """``options`` as given, each one checked (the ``lr_rule`` against ``job``'s too), each
    name among ``known`` (a misspelt option, which the adapters and the session take as
    keywords, would otherwise be passed on and never read). ``takes``: the function (an
    adapter's ``__init__``) whose other parameters a misspelt name may have meant.

    Raises:
        ConfigurationError: an option is not what its name says, or not one of ``known`` (the
            message says what to give instead).
        PowerLimitError: ``power_limit="optimize"`` where no GPU's limit could be set.
    """
    for name in options:
        if name not in known:
            raise ConfigurationError(_unknown(name, known, takes))
    meter = options.get("energy_meter")
    if meter is not None and not callable(getattr(meter, "energy", None)):
        raise ConfigurationError(
            f"energy_meter is an energy meter (zeus_bso.energy.auto_meter(), NVMLMeter(), ...) "
            f"or None (the default: zeus_bso.energy.process_meter()), not {meter!r}"
        )
    token = options.get("token")
    if token is not None and not isinstance(token, str):
        raise ConfigurationError(f"token is the server's bearer token, a str, not {token!r}")
    fallback = options.get("on_server_unavailable", "fallback")
    if fallback not in ("fallback", "raise"):
        raise ConfigurationError(
            f"on_server_unavailable is 'fallback' or 'raise', not {fallback!r}"
        )
    if not isinstance(options.get("raise_if_unconverged", False), bool):
        raise ConfigurationError(
            f"raise_if_unconverged is True or False, not {options['raise_if_unconverged']!r}"
        )
    job_lr_rule(job, options.get("lr_rule", "none"))
    reference = options.get("reference_batch_size")
    if reference is not None and (
        isinstance(reference, bool) or not isinstance(reference, int) or reference < 1
    ):
        raise ConfigurationError(
            "reference_batch_size is the batch size the learning rate was tuned at, a positive "
            f"int (or None: the job's default_batch_size), not {reference!r}"
        )
    check_max_micro_batch_size(options.get("max_micro_batch_size"))
    check_power_limit(options.get("power_limit", "off"))
    return options.copy()


def callback_arguments(
    server_url: str | None,
    job: JobLike | None,
    metric: str,
    options: RunOptions,
    takes: Callable[..., object],
) -> tuple[str, JobSpec, RunOptions]:
    """What a framework's callback checks when it is built, with no network: the server
    (``server_url``, else ``$ZEUS_BSO_SERVER_URL``), the ``job`` as a `JobSpec`, that the
    ``metric`` it reports moves the way the job judges it (`check_metric_direction`), and the run
    ``options`` (`checked_options`; ``takes``: the callback's ``__init__``).

    Raises:
        ConfigurationError: what is missing or wrong, in words that say what to give.
    """
    url = server_url_from(server_url)
    spec = required_job(job)
    check_metric_direction(metric, spec)
    return url, spec, checked_options(options, spec, RUN_OPTIONS, takes)


def _unknown(name: str, known: frozenset[str], takes: Callable[..., object] | None) -> str:
    """What to say of a keyword ``name`` that is no option of ``known`` (nor a parameter of
    ``takes``): the closest name, and the options."""
    own = []
    if takes is not None:
        parameters = inspect.signature(takes).parameters.values()
        plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        own = [p.name for p in parameters if p.kind in plain and p.name != "self"]
    close = difflib.get_close_matches(name, [*known, *own], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    who = "the run" if takes is None else takes.__qualname__.removesuffix(".__init__")
    return (
        f"{name!r} is not an option of {who}{hint} (its options: "
        f"{', '.join(sorted({*known, *own}))})"
    )
