"""Exceptions raised by ``zeus_bso_server``, named for what happened. The API chooses each one's
HTTP status, in one place (`zeus_bso_server.api.errors`), by the error and the route.

::

    ServerError                     every error this package raises on purpose
    ├── SettingsError               invalid settings; the server does not start
    ├── SchemaError                 the database schema is missing or outdated
    ├── DatabaseUnavailableError    the database cannot be reached or stayed locked (retry)
    ├── JobNotFoundError            a job id that is not registered
    ├── TrialNotFoundError          a trial that does not exist
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


class JobNotFoundError(ServerError):
    """Raised when a request names a job that is not registered."""


class TrialNotFoundError(ServerError):
    """Raised when a request names a trial that does not exist."""


class JobConfigMismatchError(ServerError):
    """Raised when a job id is registered again with a different configuration."""
