"""Exceptions raised by ``zeus_bso_server``, named for what happened. The API chooses each one's
HTTP status, in one place (`zeus_bso_server.api.errors`), by the error and the route.

::

    ServerError                     every error this package raises on purpose (exit status 1)
    ├── SettingsError               invalid settings; the server does not start (exit 2)
    ├── SchemaError                 the database schema is missing or outdated (exit 2)
    ├── ListenError                 the server cannot listen on its address and port
    ├── DatabaseUnavailableError    the database cannot be reached or stayed locked (retry)
    ├── JobNotFoundError            a job id that is not registered
    ├── UnreadableJobError          a job whose stored state cannot be read (a corrupt row)
    ├── TrialNotFoundError          a trial that does not exist
    ├── JobConfigMismatchError      a job id registered again with a different config
    ├── NewJobRefusedError          a new job whose settings cannot work (``beta_knob`` <= 1)
    │   └── PriorError              ... or whose ``prior_from`` cannot seed it
    ├── PowerProfilingOffError      a power profile for a job that does not profile power limits
    ├── NothingMeasuredError        a report of an epoch whose cost measured nothing
    └── PinError                    a pin that cannot be: a batch size the job does not have,
                                    or no recommendation to pin yet

The policy's errors (`zeus_bso.errors.PolicyError`: no converged batch size, a report that
contradicts its trial) pass through the service and are mapped by the API as well. The
command exits with an error's ``exit_code``, by the convention of both CLIs
(`zeus_bso.errors.EXIT_USAGE`: what to change is in the message; `EXIT_FAILURE`: it failed at
run time, e.g. the database could not be reached).
"""

from __future__ import annotations

from zeus_bso.errors import EXIT_FAILURE, EXIT_USAGE


class ServerError(Exception):
    """Base of the errors ``zeus_bso_server`` raises on purpose. ``message`` is safe to show."""

    exit_code: int = EXIT_FAILURE
    """The exit status of a command that ends with this error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SettingsError(ServerError):
    """Raised at start when a setting is invalid; the message says which and what to change."""

    exit_code = EXIT_USAGE


class SchemaError(ServerError):
    """Raised when the database schema is not at the version this server needs, or a migration
    asked for cannot be made (an unknown revision, a downgrade that would lose meaning)."""

    exit_code = EXIT_USAGE


class ListenError(ServerError):
    """Raised at start when the server cannot listen on its host and port (another process
    holds the port, or the address is not this machine's); the message says which."""


class MigrationFailedError(ServerError):
    """Raised when a schema migration fails partway; the message says at which revision the
    database is left and what to do."""


class UnreadableJobError(ServerError):
    """Raised for a job whose stored state cannot be read (a row corrupted outside the server):
    its own requests answer with this, lists and other jobs' views go on without it."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(
            f"job {job_id}'s stored state cannot be read ({reason}): restore the database from "
            f"a backup, or delete the job (DELETE /jobs?job_id={job_id}, `zeus-bso jobs delete "
            f"{job_id}`), which loses its history"
        )
        self.job_id = job_id


class DatabaseUnavailableError(ServerError):
    """Raised when the database cannot be reached or stays locked; the request can be retried."""


class JobNotFoundError(ServerError):
    """Raised when a request names a job that is not registered."""


class TrialNotFoundError(ServerError):
    """Raised when a request names a trial that does not exist."""


class JobConfigMismatchError(ServerError):
    """Raised when a job id is registered again with a different configuration."""


class PowerProfilingOffError(ServerError):
    """Raised when a run sends a power profile for a job that does not profile power limits
    (``power_profiling`` off, or ``eta_knob`` 0)."""


class NothingMeasuredError(ServerError):
    """Raised when a report says its run's epochs cost nothing: no energy, and no time or a job
    whose cost is its energy alone (``eta_knob`` 1). Recorded, such a batch size would be free,
    and the job would settle on it."""


class NewJobRefusedError(ServerError):
    """Raised when a new job's settings cannot make a working job (`zeus_bso.spec.new_job_refused`:
    ``beta_knob`` at 1 or below, trust mode without a declared parent); a job that exists keeps
    its settings and what it learned."""


class PriorError(NewJobRefusedError):
    """Raised when a new job's ``prior_from`` names no job, the job itself, or a job with no
    converged run at a batch size of the new one."""


class PinError(ServerError):
    """Raised when a job cannot be pinned as asked: the batch size is not one of the job's, or
    none was given and the job has no recommendation yet."""
