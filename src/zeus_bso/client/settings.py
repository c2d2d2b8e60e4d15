"""Where the server is, from the arguments or the environment (``ZEUS_BSO_SERVER_URL``,
``ZEUS_BSO_TOKEN``), as MLflow and W&B read theirs: a cluster image sets them once for every
training script."""

from __future__ import annotations

import os

from zeus_bso.errors import ConfigurationError
from zeus_bso.spec import JobSpec

SERVER_URL_VARIABLE = "ZEUS_BSO_SERVER_URL"
TOKEN_VARIABLE = "ZEUS_BSO_TOKEN"
HEARTBEAT_VARIABLE = "ZEUS_BSO_HEARTBEAT_SECONDS"
LIGHTNING_JOB_VARIABLE = "ZEUS_BSO_LIGHTNING_JOB"
"""The job (JSON, or a JSON file's path) for which every Lightning Trainer gets a callback."""
DEFAULT_HEARTBEAT_SECONDS = 60.0


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
        text = os.environ.get(HEARTBEAT_VARIABLE, "").strip()
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
