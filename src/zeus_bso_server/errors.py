"""Exceptions raised by ``zeus_bso_server``. The API maps each to an HTTP status in one place.

::

    ServerError                     every error this package raises on purpose
    ├── SettingsError               invalid settings; the server does not start
    ├── SchemaError                 the database schema is missing or outdated
    ├── DatabaseUnavailableError    the database cannot be reached or stayed locked (retry)
    ├── UnknownJobError             a job id that is not registered (400, as upstream)
    ├── JobNotFoundError            the same, on routes where upstream answers 404
    ├── UnknownTrialError           a report for a trial that does not exist (400, as upstream)
    ├── TrialNotFoundError          the same, on routes where upstream answers 404
    └── JobConfigMismatchError      a job id registered again with a different config

The policy's errors (`zeus_bso.errors.PolicyError`: no converged batch size, a report that
contradicts its trial) pass through the service and are mapped by the API as well.
"""

from __future__ import annotations


class ServerError(Exception):
    """Base of the errors ``zeus_bso_server`` raises on purpose. ``message`` is safe to show."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SettingsError(ServerError):
    """Raised at start when a setting is invalid; the message says which and what to change."""


class SchemaError(ServerError):
    """Raised when the database schema is not at the version this server needs."""


class DatabaseUnavailableError(ServerError):
    """Raised when the database cannot be reached or stays locked; the request can be retried."""


class UnknownJobError(ServerError):
    """Raised when a request names a job that is not registered."""


class JobNotFoundError(UnknownJobError):
    """Raised when a job to read or delete does not exist."""


class UnknownTrialError(ServerError):
    """Raised when a report names a trial that does not exist."""


class TrialNotFoundError(UnknownTrialError):
    """Raised when a trial to end or renew does not exist."""


class JobConfigMismatchError(ServerError):
    """Raised when a job id is registered again with a different configuration."""
