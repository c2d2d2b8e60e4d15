"""Server settings: typed fields read from ``ZEUS_BSO_*`` environment variables and ``.env``."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from zeus_bso_server.errors import SettingsError
from zeus_bso_server.store.database import read_password
from zeus_bso_server.store.dialects import LOCK_TIMEOUT_MS, dialect_named

LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


def to_engine_url(raw: str, user: str | None = None, password: str | None = None) -> URL:
    """Map a plain database URL (``sqlite:///x.db``, ``postgresql://...``) to the driver we use.

    SQLite uses the standard library's driver, PostgreSQL psycopg 3 and MySQL PyMySQL.

    Raises:
        SettingsError: the URL cannot be parsed or names an unsupported database or driver.
    """
    raw = _hosts_in_query(raw.strip())
    try:
        url = make_url(raw)
    except ValueError as err:  # SQLAlchemy's, of the port
        raise SettingsError("the database URL's port is not a number") from err
    except ArgumentError as err:
        raise SettingsError(
            "the database URL cannot be parsed; write it as sqlite:///path/to/file.db "
            "or postgresql://user:password@host:5432/dbname"
        ) from err
    dialect = dialect_named(url.drivername)
    if dialect is None:
        raise SettingsError(
            f"database driver {url.drivername!r} is not supported; use sqlite:///..., "
            "postgresql://... (psycopg) or mysql://... (PyMySQL)"
        )
    # The URL's own mistakes first: installing the driver would not mend them.
    if dialect.backend != "sqlite" and "@" in f"{url.host or ''}{url.database or ''}":
        # The password's '@' ended it early: what followed became the host, or the database.
        raise SettingsError(
            f"the {dialect.backend} URL has an '@' after its user and password: an '@' in the "
            "password must be written %40 (percent-encoded), or give the password alone in "
            "ZEUS_BSO_DB_PASSWORD"
        )
    if dialect.module is not None and importlib.util.find_spec(dialect.module) is None:
        raise SettingsError(
            f"the {dialect.backend} driver {dialect.module} is not installed; {dialect.install}"
        )
    url = dialect.url(url)
    if user is not None:
        url = url.set(username=user)
    if password is not None:
        url = url.set(password=password)
    return url


def _hosts_in_query(raw: str) -> str:
    """A PostgreSQL URL of several hosts in libpq's form (``postgresql://u@h1:5432,h2:5432/db``:
    a primary and its standbys, which libpq tries in turn, as Patroni's documentation writes
    it) in SQLAlchemy's (``postgresql://u@/db?host=h1,h2&port=5432,5432``), which passes them on
    to libpq; an IPv6 host is written in brackets (``[fd00::1]:5432``). Any other URL as it is.

    Raises:
        SettingsError: a MySQL URL of several hosts (PyMySQL takes one), or a host that is not
            host or host:port.
    """
    parts = urlsplit(raw)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return raw
    if not parts.scheme.startswith("postgres"):
        raise SettingsError(
            f"the database URL names several hosts ({hosts}); only a PostgreSQL URL may"
        )
    names: list[str] = []
    ports: list[str] = []
    for token in hosts.split(","):
        found = _HOST_PORT.fullmatch(token)
        if found is None:
            raise SettingsError(
                f"the database URL's host {token!r} is not host or host:port (of {hosts})"
            )
        names.append(found["bracketed"] or found["name"])
        ports.append(found["port"] or "")
    query = "&".join(
        [f"host={','.join(names)}", f"port={','.join(ports)}", *([parts.query] * bool(parts.query))]
    )
    return urlunsplit((parts.scheme, f"{userinfo}{at}", parts.path, query, parts.fragment))


_HOST_PORT = re.compile(
    r"(?:\[(?P<bracketed>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>\d+))?"
)
"""One host of a libpq URL of several: a name or an IPv4 address, or an IPv6 one in brackets,
and its port, if any."""


def _token_of(given: SecretStr | None, file: Path | None, name: str) -> SecretStr | None:
    """The token ``name`` sets, or its file (``<name>_FILE``: the first line), or None.

    Raises:
        ValueError: both are set, the file cannot be read, or the token is empty.
    """
    if file is not None:
        if given is not None:
            raise ValueError(f"set {name} or {name}_FILE, not both")
        try:
            lines = file.read_text().splitlines()
        except OSError as err:
            raise ValueError(f"cannot read the token file {file}: {err.strerror}") from None
        if not lines or not lines[0].strip():
            raise ValueError(f"the token file {file} is empty")
        given = SecretStr(lines[0].strip())
    if given is None:
        return None
    # A secret written with ``echo`` ends in a line break, which no client can send: every
    # request was refused.
    value = given.get_secret_value().strip()
    if not value:
        raise ValueError(f"{name} is empty")
    if any(not char.isprintable() for char in value):
        raise ValueError(
            f"{name} has a line break or another control character inside it: give the token "
            "alone (it is not shown here)"
        )
    return SecretStr(value)


def _check_tls(cert: Path | None, key: Path | None) -> None:
    """That the certificate and its key are both given or neither, and load together (each
    file readable, the key the certificate's), so a mistake stops the start with what to fix.

    Raises:
        ValueError: they do not.
    """
    if cert is None and key is None:
        return
    if cert is None or key is None:
        given, missing = ("CERT", "KEY") if key is None else ("KEY", "CERT")
        raise ValueError(
            f"ZEUS_BSO_TLS_{given}_FILE needs ZEUS_BSO_TLS_{missing}_FILE (--tls-cert-file "
            "and --tls-key-file): HTTPS takes a certificate and its private key"
        )
    for name, path in (("certificate", cert), ("key", key)):
        try:
            path.read_bytes()
        except OSError as err:
            raise ValueError(f"cannot read the TLS {name} file {path}: {err.strerror}") from None
    try:
        # An encrypted key gets an empty password, not OpenSSL's prompt on the terminal.
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key, b"")
    except ssl.SSLError as err:
        raise ValueError(
            f"the TLS certificate {cert} and key {key} do not load together ({err.reason or err}):"
            " give the PEM certificate and its own unencrypted private key"
        ) from None


_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")
"""A segment of a root path: URL characters that need no escaping (RFC 3986's unreserved)."""


class Settings(BaseSettings):
    """Every server setting. Environment: ``ZEUS_BSO_<NAME>``; also read from ``./.env``."""

    model_config = SettingsConfigDict(
        env_prefix="ZEUS_BSO_",
        env_file=".env",
        extra="ignore",
        validate_default=True,
        # A value from a secret or a file written with ``echo`` ends in a line break: a SQLite
        # file was created under a name ending in one (a fresh, empty database), a PostgreSQL
        # database of that name was looked for.
        str_strip_whitespace=True,
    )

    database_url: str = "sqlite:///./zeus-bso.db"
    """Database URL; plain ``sqlite://`` and ``postgresql://`` URLs map to the drivers we use."""
    db_user: str | None = None
    """Overrides the URL's user name (upstream's ``ZEUS_BSO_DB_USER``)."""
    db_password: SecretStr | None = None
    """Overrides the URL's password (upstream's ``ZEUS_BSO_DB_PASSWORD``)."""
    db_password_file: Path | None = None
    """The file of the database's password (its first line), read again at each new connection:
    a rotated secret (a Kubernetes Secret mounted as a file, a Docker secret, a vault agent's
    file) is taken without a restart. Not with ``ZEUS_BSO_DB_PASSWORD``."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    log_level: LogLevel = "INFO"
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object a log line (time, level, logger, message, request id), as log
    stacks of clusters expect."""
    echo_sql: bool = False
    lease_seconds: float = Field(default=3600.0, gt=0, le=7 * 24 * 3600, allow_inf_nan=False)
    """How long a dispatched trial lives without a report or heartbeat before it is abandoned.
    After a report, the lease is at least three times the run's mean epoch time."""
    stable_job_ids: bool = False
    """A registration without a ``job_id`` (upstream Zeus's client, whose docs leave it out)
    gets the id our client computes from the job's settings (`zeus_bso.spec.stable_job_id`)
    instead of a new random one, so that every recurrence of the same script finds the same
    job and learns across them. Off: upstream's behaviour, a new job at every registration."""
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0, le=600_000)
    lock_timeout_ms: int = Field(default=LOCK_TIMEOUT_MS, ge=0, le=600_000)
    """PostgreSQL and MySQL: how long a request waits for a lock another server process holds
    (a job's row) before it answers 503, nothing written, which clients retry (0: as long as
    it takes)."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    timeout_keep_alive: int = Field(default=5, ge=1, le=3600)
    """Seconds an idle keep-alive connection stays open."""
    limit_concurrency: int | None = Field(default=None, ge=1)
    """Most connections and tasks a worker serves at once; past it, new ones get 503 (none by
    default: a slow client holds only its own connection, and headers that never finish are
    the reverse proxy's to time out)."""
    token: SecretStr | None = None
    """Bearer token every route but the health checks requires (``ZEUS_BSO_TOKEN``)."""
    token_file: Path | None = None
    """A file holding the token (its first line), instead of ``ZEUS_BSO_TOKEN``."""
    read_token: SecretStr | None = None
    """A second token that reads only (``ZEUS_BSO_READ_TOKEN``): the dashboard, the read API,
    ``/metrics``; anything that changes state (a registration, a trial, a report, a pin, a
    deletion) is refused with 403. For those who look, not train. Needs ``ZEUS_BSO_TOKEN``."""
    read_token_file: Path | None = None
    """A file holding the read-only token (its first line), instead of ``ZEUS_BSO_READ_TOKEN``."""
    previous_token: SecretStr | None = None
    """The server's token before the last rotation (``ZEUS_BSO_PREVIOUS_TOKEN``), which it still
    takes as its own while clients move to the new ``ZEUS_BSO_TOKEN``: runs that started with it
    report to the end. ``/metrics`` counts the requests that send it
    (``zeus_bso_previous_token_requests``): once none come, unset it. Needs ``ZEUS_BSO_TOKEN``."""
    previous_token_file: Path | None = None
    """A file holding the previous token (its first line), instead of
    ``ZEUS_BSO_PREVIOUS_TOKEN``."""
    allow_unauthenticated: bool = False
    """Listen on a non-loopback address without a token anyway."""
    root_path: str = ""
    """The path prefix a reverse proxy serves the server below (``/zeus-bso`` for
    ``https://tools.example.com/zeus-bso/``), which the proxy strips before it forwards; the
    dashboard's links and redirects and the API docs then carry it. Empty by default: the
    server is served at the root."""
    tls_cert_file: Path | None = None
    """A PEM file with the server's TLS certificate (and any intermediates after it): the server
    answers HTTPS only. Needs ``ZEUS_BSO_TLS_KEY_FILE``. A renewed certificate is read at the
    next start."""
    tls_key_file: Path | None = None
    """The PEM file of the certificate's private key (unencrypted), readable by the server
    only."""
    allowed_hosts: str = ""
    """Host names (comma-separated) the server answers besides the loopback names and its own:
    every request on a tokenless loopback server, and browsers' requests on any other (e.g. the
    name a dashboard is reached by, or that a reverse proxy forwards in ``Host``). Others are
    refused, which keeps web pages whose names resolve to the server out (DNS rebinding)."""

    @property
    def host_names(self) -> frozenset[str]:
        """`allowed_hosts`, each name lower-case."""
        return frozenset(n.strip().lower() for n in self.allowed_hosts.split(",") if n.strip())

    @model_validator(mode="after")
    def _one_password(self) -> Self:
        if self.db_password_file is None:
            return self
        if self.db_password is not None:
            raise ValueError("set ZEUS_BSO_DB_PASSWORD or ZEUS_BSO_DB_PASSWORD_FILE, not both")
        read_password(self.db_password_file)
        return self

    @model_validator(mode="after")
    def _token_and_exposure(self) -> Self:
        self.token = _token_of(self.token, self.token_file, "ZEUS_BSO_TOKEN")
        self.read_token = _token_of(self.read_token, self.read_token_file, "ZEUS_BSO_READ_TOKEN")
        self.previous_token = _token_of(
            self.previous_token, self.previous_token_file, "ZEUS_BSO_PREVIOUS_TOKEN"
        )
        if self.read_token is not None:
            if self.token is None:
                raise ValueError(
                    "ZEUS_BSO_READ_TOKEN needs ZEUS_BSO_TOKEN: without it every request is "
                    "let in, so a read-only token limits nothing"
                )
            if self.read_token.get_secret_value() == self.token.get_secret_value():
                raise ValueError("ZEUS_BSO_READ_TOKEN must differ from ZEUS_BSO_TOKEN")
        if self.previous_token is not None:
            previous = self.previous_token.get_secret_value()
            if self.token is None:
                raise ValueError(
                    "ZEUS_BSO_PREVIOUS_TOKEN needs ZEUS_BSO_TOKEN (the new token it is rotated "
                    "to): without one every request is let in"
                )
            if previous == self.token.get_secret_value():
                raise ValueError(
                    "ZEUS_BSO_PREVIOUS_TOKEN is ZEUS_BSO_TOKEN: give the token before the "
                    "rotation, or unset it"
                )
            if self.read_token is not None and previous == self.read_token.get_secret_value():
                raise ValueError(
                    "ZEUS_BSO_PREVIOUS_TOKEN is ZEUS_BSO_READ_TOKEN: the previous token opens "
                    "what the server's does, the read-only one must not"
                )
        _check_tls(self.tls_cert_file, self.tls_key_file)
        if self.token is None and not self.is_loopback and not self.allow_unauthenticated:
            raise ValueError(
                f"refusing to listen on {self.host} without a token: set ZEUS_BSO_TOKEN (or "
                "ZEUS_BSO_TOKEN_FILE), or allow it explicitly with --allow-unauthenticated"
            )
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator(
        "db_password", "db_password_file", "token_file", "read_token_file", "previous_token_file",
        "tls_cert_file", "tls_key_file", mode="before",
    )  # fmt: skip
    @classmethod
    def _without_line_breaks(cls, value: object) -> object:
        """A password or a file's name without the line breaks around it (white space that is
        not a line break may be part of a password)."""
        return value.strip("\r\n") if isinstance(value, str) else value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("host must not be empty")
        return value

    @field_validator("root_path")
    @classmethod
    def _root_path(cls, value: str) -> str:
        if not value:
            return value
        segments = value.split("/")
        if (
            segments[0]
            or not all(segments[1:])
            or not all(_PATH_SEGMENT.fullmatch(segment) for segment in segments[1:])
        ):
            raise ValueError(
                f"{value!r} is not a path prefix: give one like /zeus-bso (a leading '/', no "
                "trailing '/', letters, digits and -._~ between the slashes)"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            to_engine_url(value)
        except SettingsError as err:
            raise ValueError(err.message) from None
        return value

    @property
    def engine_url(self) -> URL:
        """The database URL with its driver and any user/password override."""
        password = self.db_password.get_secret_value() if self.db_password else None
        return to_engine_url(self.database_url, self.db_user, password)

    @property
    def scheme(self) -> str:
        """``https`` with a TLS certificate, else ``http``."""
        return "https" if self.tls_cert_file is not None else "http"

    @property
    def address(self) -> str:
        """``host:port`` as a URL writes it (an IPv6 address in brackets: ``[::1]:8000``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @field_validator("tls_cert_file", "tls_key_file", mode="before")
    @classmethod
    def _unset_if_blank(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def is_loopback(self) -> bool:
        """Whether ``host`` only accepts connections from this machine."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def load_settings(flags: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build settings from the environment and ``.env``, with explicit overrides on top.

    ``flags`` names the command-line option each override came from (``{"port": "--port"}``):
    an invalid value given there is named by its option, not by its environment variable.

    Raises:
        SettingsError: a setting is invalid (the message names each bad one), or ``.env`` in
            the working directory cannot be read.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    from_flags = {field: flag for field, flag in (flags or {}).items() if field in given}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except OSError as err:  # ./.env where this user may not look
        raise SettingsError(
            f"cannot read the settings file .env in the working directory ({err.strerror}): "
            "start the server in a directory this user can read, or make .env readable"
        ) from None
    except ValidationError as err:
        problems = "; ".join(
            (f"{_setting_name(e['loc'], from_flags)}: " if e["loc"] else "")
            + e["msg"].removeprefix("Value error, ")
            for e in err.errors(include_input=False, include_url=False)
        )
        raise SettingsError(f"invalid settings: {problems}") from None


def _setting_name(loc: tuple[int | str, ...], from_flags: Mapping[str, str]) -> str:
    """The option a bad value came from (``--port``), else its variable (``ZEUS_BSO_PORT``)."""
    field = str(loc[0])
    if field in from_flags:
        return from_flags[field]
    return f"ZEUS_BSO_{'_'.join(str(part) for part in loc).upper()}"
