"""What a run is given, checked before any network: where the server is, from the arguments or
the environment (``ZEUS_BSO_SERVER_URL``, ``ZEUS_BSO_TOKEN``), as MLflow and W&B read theirs (a
cluster image sets them once for every training script), the job, and the options every entry
point takes; and the metric a run monitors and reports, against its job's target. The client,
the training session and the framework adapters read them here: an adapter needs nothing of the
client's."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from zeus_bso.errors import ConfigurationError, validation_words
from zeus_bso.power.run import PowerLimitMode, check_power_limit
from zeus_bso.scaling.lr import LrRule, check_rule
from zeus_bso.spec import JobSpec

SERVER_URL_VARIABLE = "ZEUS_BSO_SERVER_URL"
TOKEN_VARIABLE = "ZEUS_BSO_TOKEN"
TOKEN_FILE_VARIABLE = "ZEUS_BSO_TOKEN_FILE"
"""A file whose first line is the token (a mounted secret), instead of ``ZEUS_BSO_TOKEN``."""
HEARTBEAT_VARIABLE = "ZEUS_BSO_HEARTBEAT_SECONDS"
LIGHTNING_JOB_VARIABLE = "ZEUS_BSO_LIGHTNING_JOB"
"""The job (JSON, or a JSON file's path) for which every Lightning Trainer gets a callback."""
DEFAULT_HEARTBEAT_SECONDS = 60.0


def environment_setting(name: str, default: str = "") -> str:
    """``$name`` without surrounding blanks; ``default`` where it is unset or blank."""
    return os.environ.get(name, "").strip() or default


def server_url_from(given: str | None) -> str:
    """``given``, else ``$ZEUS_BSO_SERVER_URL``.

    Raises:
        ConfigurationError: neither is set; the message names both settings.
    """
    url = given or os.environ.get(SERVER_URL_VARIABLE)
    if not url:
        raise ConfigurationError(
            f"no zeus-bso server: pass server_url=... or set {SERVER_URL_VARIABLE} (and "
            f"{TOKEN_VARIABLE} for a server with a token)"
        )
    return checked_server_url(url.strip())


def checked_server_url(url: str) -> str:
    """``url``, if it names an HTTP server: a URL without a scheme (``host:8000``) or with
    another would otherwise fail at every request, and a run would take that for an outage
    and train for good without the server.

    Raises:
        ConfigurationError: it has no ``http://`` or ``https://`` scheme, or no host; the
            message gives the URL to use.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ConfigurationError(
            f"the server URL {url!r} has no scheme: use 'http://{url}' (or 'https://{url}' for "
            "a server with TLS)"
        )
    if scheme.lower() not in ("http", "https"):
        raise ConfigurationError(
            f"the server URL {url!r} is not an HTTP one: use 'http://{rest}' (or "
            f"'https://{rest}' for a server with TLS)"
        )
    if not rest.split("/", 1)[0]:
        raise ConfigurationError(
            f"the server URL {url!r} names no host: e.g. 'http://127.0.0.1:8000'"
        )
    return url


def check_max_micro_batch_size(value: int | None) -> int | None:
    """``max_micro_batch_size`` as given, or a `ConfigurationError` that says what to change."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(
            f"max_micro_batch_size must be a positive int (or None: no accumulation), not {value!r}"
        )
    return value


def check_memory_check_steps(value: int) -> int:
    """A callback's ``memory_check_steps`` as given, or a `ConfigurationError` that says what to
    change."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"memory_check_steps is a number of training steps, 0 or more (0: no memory "
            f"check), not {value!r}"
        )
    return value


def job_lr_rule(job: JobSpec, given: str) -> LrRule:
    """The learning-rate rule a run of ``job`` trains with: ``given`` (the client's
    ``lr_rule``), or the job's own ``lr_rule`` where ``given`` is ``"none"`` (the default).

    Raises:
        ConfigurationError: ``given`` is not a rule, or the two name different rules.
    """
    rule = check_rule(given)
    if job.lr_rule is None or rule == job.lr_rule:
        return rule
    if rule == "none":
        return job.lr_rule
    raise ConfigurationError(
        f"lr_rule={rule!r}, but the job says lr_rule={job.lr_rule!r}: give one (the job's "
        "rule is part of its history)"
    )


def token_from(given: str | None) -> str | None:
    """``given``, else ``$ZEUS_BSO_TOKEN``, else the first line of the file
    ``$ZEUS_BSO_TOKEN_FILE`` names (a secret mounted as a file, as the server reads its own);
    None: no token.

    Raises:
        ConfigurationError: both variables are set, or the file cannot be read or is empty.
    """
    if given is not None:
        return given
    token, file = os.environ.get(TOKEN_VARIABLE) or None, environment_setting(TOKEN_FILE_VARIABLE)
    if not file:
        return token
    if token is not None:
        raise ConfigurationError(f"set {TOKEN_VARIABLE} or {TOKEN_FILE_VARIABLE}, not both")
    try:
        lines = Path(file).expanduser().read_text().splitlines()
    except OSError as err:
        raise ConfigurationError(
            f"{TOKEN_FILE_VARIABLE}={file!r}: cannot read it ({err.strerror})"
        ) from None
    if not lines or not lines[0].strip():
        raise ConfigurationError(f"{TOKEN_FILE_VARIABLE}={file!r}: the file is empty")
    return lines[0].strip()


def heartbeat_seconds_from(given: float | None) -> float:
    """``given``, else ``$ZEUS_BSO_HEARTBEAT_SECONDS``, else 60 s (0: no heartbeat).

    Raises:
        ConfigurationError: the setting is not a number of seconds, 0 or more.
    """
    if given is None:
        text = environment_setting(HEARTBEAT_VARIABLE)
        try:
            given = float(text) if text else DEFAULT_HEARTBEAT_SECONDS
        except ValueError:
            raise ConfigurationError(
                f"{HEARTBEAT_VARIABLE}={text!r} is not a number of seconds"
            ) from None
    if not given >= 0 or given == float("inf"):
        raise ConfigurationError(f"heartbeat_seconds is 0 (none) or more seconds, not {given}")
    return given


JobLike = JobSpec | Mapping[str, Any]
"""A job as every entry point takes it: a `JobSpec`, or its fields as a mapping (a ``dict``, or
the ``DictConfig`` that Hydra's ``instantiate`` passes for a job without ``_target_``)."""


def required_job(job: JobLike | None) -> JobSpec:
    """``job``, which every entry point needs, as a `JobSpec`.

    Raises:
        ConfigurationError: it was not given, or its fields do not make a valid job.
    """
    if job is None:
        raise ConfigurationError("job=... is required: the recurring job, a zeus_bso.JobSpec")
    if isinstance(job, JobSpec):
        return job
    if not isinstance(job, Mapping):
        raise ConfigurationError(
            f"job is a zeus_bso.JobSpec or a mapping of its fields, not a {type(job).__name__}"
        )
    try:
        return JobSpec.model_validate(_plain(job))
    except ValueError as err:
        raise ConfigurationError(f"job=... is not a valid job: {validation_words(err)}") from None


def check_name(value: object, option: str, names: str, example: str) -> str:
    """``value``, a callback's ``option`` that ``names`` something, if it is a non-empty str; else
    a `ConfigurationError` that says so, with an ``example``."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{option} names {names}, e.g. {example!r}; not {value!r}")
    return value


def check_metric_direction(metric: str, job: JobSpec) -> None:
    """Refuses a loss judged higher-is-better by default: a metric named like one (``val_loss``,
    ``eval/loss``) falls as training goes, and with ``higher_is_better_metric`` left at True a
    run "reached" ``target_metric`` as soon as its loss was at or above it, at its first
    validation. (The HF Trainer's ``greater_is_better`` reads such a name the same way.) A job
    that sets ``higher_is_better_metric=True`` itself keeps it.

    Raises:
        ConfigurationError: saying what to set.
    """
    words = [word for word in re.split(r"[^a-z0-9]+", metric.lower()) if word]
    if not words or words[-1] != "loss" or {"neg", "negative", "minus"} & set(words):
        return
    if not job.higher_is_better_metric or "higher_is_better_metric" in job.model_fields_set:
        return
    raise ConfigurationError(
        f"the metric {metric!r} is a loss, which falls as training goes, but the job counts a"
        " higher metric as better (higher_is_better_metric defaults to True): a run would reach"
        f" target_metric {job.target_metric:g} as soon as its loss is at or above it. Set"
        " higher_is_better_metric=False in the job, with the loss to reach as target_metric"
        " (or set it to True yourself to keep it)"
    )


def check_reported_metric(metric: float, job: JobSpec, reported: int) -> None:
    """Refuses a metric that cannot be judged against ``job``'s target, before it counts: a
    run's first report (``reported``: epochs reported before it) above 1, at most 100, against
    a ``target_metric`` of at most 1, higher being better: a percentage against a fraction
    (accuracy as ``100 * correct / total``, as many scripts compute it), which "reached" the
    target at once, every run converging at its first validation. (A metric that is not a
    number ends the run as diverged: `zeus_bso.training.server_run.ServerRun.on_evaluate`.)

    Raises:
        ConfigurationError: a percentage against a fraction; it says what to change.
    """
    target = job.target_metric
    if reported or not job.higher_is_better_metric or not 0 < target <= 1 < metric <= 100:
        return
    raise ConfigurationError(
        f"the first metric reported is {metric:g} and target_metric is {target:g}: a percentage"
        " against a fraction? Every run would reach the target at once. Report the metric as"
        f" the target is given ({metric / 100:g}), or give the target as a percentage"
        f" ({target * 100:g})"
    )


def metric_scale_warning(metric: float, job: JobSpec, reported: int) -> str | None:
    """A warning for a run's first report (``reported``: epochs reported before it) of a
    fraction, 0 to 1, against a ``target_metric`` above 1 and at most 100, higher being better:
    most likely an accuracy as ``correct / total`` against a target given as a percentage,
    which no run reaches: each would train to ``max_epochs``, and the job's pruning round end
    with no batch size converged. Said, not refused (the reverse of `check_reported_metric`): a
    metric on a 0-100 scale can start below 1 (a BLEU score, a thousand classes' accuracy after
    one epoch). None: nothing to say."""
    target = job.target_metric
    if reported or not job.higher_is_better_metric or not 0 <= metric <= 1 < target <= 100:
        return None
    return (
        f"the first metric reported is {metric:g} and target_metric is {target:g}: a fraction"
        " against a percentage? No run reaches the target if so, and each trains to"
        f" max_epochs ({job.max_epochs}). Report the metric as the target is given"
        f" ({metric * 100:g}), or give the target as a fraction ({target / 100:g})"
    )


def _plain(value: object) -> object:
    """``value`` with its mappings as dicts and its sequences as lists, all the way down (a
    config library's own containers are neither, for pydantic)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True)
class LightningSettings:
    """What `lightning_settings` reads from the environment: the callback's arguments."""

    job: JobSpec
    monitor: str
    lr_rule: LrRule
    max_micro_batch_size: int | None
    power_limit: PowerLimitMode


def lightning_settings() -> LightningSettings | None:
    """The callback every Lightning Trainer gets in this environment (`LIGHTNING_JOB_VARIABLE`
    names the job, as JSON or a JSON file's path; None: it is unset), with
    ``ZEUS_BSO_MONITOR`` (default ``val_acc``), ``ZEUS_BSO_LR_RULE`` (default ``none``),
    ``ZEUS_BSO_MAX_MICRO_BATCH_SIZE`` and ``ZEUS_BSO_POWER_LIMIT`` (default ``off``). The server
    comes from ``ZEUS_BSO_SERVER_URL`` (required) and ``ZEUS_BSO_TOKEN``.

    Raises:
        ConfigurationError: the job or a setting cannot be read, or no server is set; the
            message says which.
    """
    given = environment_setting(LIGHTNING_JOB_VARIABLE)
    if not given:
        return None
    text = given
    if not given.startswith("{"):
        try:
            text = Path(given).read_text()
        except OSError as err:
            raise ConfigurationError(
                f"{LIGHTNING_JOB_VARIABLE}={given!r} is neither a job as JSON nor a readable "
                f"JSON file: {err.strerror}"
            ) from None
    try:
        job = JobSpec.model_validate_json(text)
    except ValueError as err:
        raise ConfigurationError(
            f"{LIGHTNING_JOB_VARIABLE} does not hold a valid job: {validation_words(err)}"
        ) from None
    micro = environment_setting("ZEUS_BSO_MAX_MICRO_BATCH_SIZE")
    try:
        max_micro = int(micro) if micro else None
    except ValueError:
        raise ConfigurationError(
            f"ZEUS_BSO_MAX_MICRO_BATCH_SIZE={micro!r} is not a whole number"
        ) from None
    server_url_from(None)  # the callback's server: an error now, naming both settings
    return LightningSettings(
        job=job,
        monitor=environment_setting("ZEUS_BSO_MONITOR", "val_acc"),
        lr_rule=check_rule(environment_setting("ZEUS_BSO_LR_RULE", "none")),
        max_micro_batch_size=check_max_micro_batch_size(max_micro),
        power_limit=check_power_limit(environment_setting("ZEUS_BSO_POWER_LIMIT", "off")),
    )


def shown_url(url: str) -> str:
    """``url`` as errors, checks and logs show it: credentials in it as ``user:***@``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
