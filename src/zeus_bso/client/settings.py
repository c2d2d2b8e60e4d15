"""Where the server is, from the arguments or the environment (``ZEUS_BSO_SERVER_URL``,
``ZEUS_BSO_TOKEN``), as MLflow and W&B read theirs: a cluster image sets them once for every
training script."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from zeus_bso.client.accumulation import check_max_micro_batch_size
from zeus_bso.errors import ConfigurationError, validation_words
from zeus_bso.power.run import PowerLimitMode, check_power_limit
from zeus_bso.scaling.lr import LrRule, check_rule
from zeus_bso.spec import JobSpec

SERVER_URL_VARIABLE = "ZEUS_BSO_SERVER_URL"
TOKEN_VARIABLE = "ZEUS_BSO_TOKEN"
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
    return url


def token_from(given: str | None) -> str | None:
    """``given``, else ``$ZEUS_BSO_TOKEN`` (None: no token)."""
    return given if given is not None else os.environ.get(TOKEN_VARIABLE) or None


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


def required_job(job: JobSpec | None) -> JobSpec:
    """``job``, which every entry point needs.

    Raises:
        ConfigurationError: it was not given.
    """
    if job is None:
        raise ConfigurationError("job=... is required: the recurring job, a zeus_bso.JobSpec")
    return job


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
