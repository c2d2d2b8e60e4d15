"""``zeus-bso-server``: run the server and manage its database."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import DBAPIError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_fixed,
)

from zeus_bso.entry import Interrupt, command_of, deferred_interrupt, version_option
from zeus_bso.errors import EXIT_FAILURE, EXIT_STATUSES, EXIT_USAGE
from zeus_bso_server import __version__
from zeus_bso_server.errors import (
    DatabaseUnavailableError,
    ListenError,
    ServerError,
    SettingsError,
)
from zeus_bso_server.observability import JsonFormatter
from zeus_bso_server.settings import Settings, load_settings, to_engine_url
from zeus_bso_server.store.database import Database, shown_url
from zeus_bso_server.store.dialects import DIALECTS
from zeus_bso_server.store.schema import HEAD, check_schema, current_revision

app = typer.Typer(
    help="zeus-bso server: learns the cheapest batch size of recurring training jobs.",
    epilog=EXIT_STATUSES,
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@app.callback()
def _main(version: Annotated[bool, version_option("zeus-bso-server")] = False) -> None:
    """zeus-bso server: learns the cheapest batch size of recurring training jobs."""


err = Console(stderr=True, soft_wrap=True)

APP = "zeus_bso_server.api.app:create_app"
STARTUP_FAILURE = 3  # uvicorn's status when the server cannot start (e.g. the port is taken)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (sqlite:///path.db, postgresql://user:pw@host/db). "
        "Default: $ZEUS_BSO_DATABASE_URL or sqlite:///./zeus-bso.db",
        show_default=False,
    ),
]


def _fail(error: ServerError, *, json_lines: bool = False) -> typer.Exit:
    if json_lines:  # --log-format json: this line too is a JSON object
        record = logging.LogRecord(
            "zeus_bso_server", logging.CRITICAL, __file__, 0, error.message, None, None
        )
        print(JsonFormatter().format(record), file=sys.stderr, flush=True)
    else:
        # The message is text, not markup: "pip install 'zeus-bso[server]'" keeps its brackets.
        err.print(f"[bold red]error:[/] {escape(error.message)}", highlight=False)
    return typer.Exit(code=error.exit_code)


T = TypeVar("T")


def _on_database(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """Run ``work`` on the settings' database, with its errors as `ServerError`s.

    Raises:
        SchemaError: an unknown revision.
        DatabaseUnavailableError: the database cannot be reached or refused a statement.
    """

    async def run() -> T:
        db = Database(
            settings.engine_url,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
            lock_timeout_ms=settings.lock_timeout_ms,
            password_file=settings.db_password_file,
        )
        try:
            return await work(db)
        finally:
            db.dispose()

    try:
        return asyncio.run(run())
    except DBAPIError as error:  # the driver's own words, without SQLAlchemy's link
        raise DatabaseUnavailableError(
            f"cannot use the database {_display_url(settings)}: {error.orig}"
        ) from None
    except OSError as error:
        raise DatabaseUnavailableError(
            f"cannot open the database {_display_url(settings)}: {error}"
        ) from None


def _migrate_schema(
    settings: Settings, revision: str = "head", *, down: bool = False
) -> tuple[str | None, str | None, list[str]]:
    """Migrate; returns the revisions before and after, and a downgrade's notices."""

    async def migrate(db: Database) -> tuple[str | None, str | None, list[str]]:
        if not down and revision == "head" and (current := await current_revision(db)) == HEAD:
            return current, current, []  # at the head already: no Alembic to load
        from zeus_bso_server.store.migrate import downgrade, upgrade

        if down:
            return await downgrade(db, revision)
        return (*await upgrade(db, revision), [])

    return _on_database(settings, migrate)


def _database_settings(db: str | None) -> Settings:
    """Settings of the `db` commands. They listen on nothing, so the listening address and its
    token rule do not apply: a container whose environment says ZEUS_BSO_HOST=0.0.0.0 can run
    its migration without the server's token."""
    return load_settings({"database_url": "--db"}, database_url=db, host="127.0.0.1")


def _display_url(settings: Settings) -> str:
    return shown_url(settings.engine_url)


SERVE_FLAGS = {
    "host": "--host",
    "port": "--port",
    "database_url": "--db",
    "workers": "--workers",
    "log_level": "--log-level",
    "log_format": "--log-format",
    "allow_unauthenticated": "--allow-unauthenticated",
    "root_path": "--root-path",
    "tls_cert_file": "--tls-cert-file",
    "tls_key_file": "--tls-key-file",
}
"""The setting each option of `serve` gives (an invalid value is named by its option)."""


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on [default: 127.0.0.1]")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port [default: 8000]")] = None,
    db: DbOption = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes [default: 1]")] = None,
    log_level: Annotated[
        str | None, typer.Option(help="CRITICAL, ERROR, WARNING, INFO or DEBUG [default: INFO]")
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="text, or json: one JSON object a line [default: text]")
    ] = None,
    no_upgrade: Annotated[
        bool, typer.Option("--no-upgrade", help="Refuse an outdated schema instead of upgrading it")
    ] = False,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            help="Listen on a non-loopback address without ZEUS_BSO_TOKEN anyway",
        ),
    ] = False,
    root_path: Annotated[
        str | None,
        typer.Option(
            help="The path prefix a reverse proxy serves the server below and strips "
            "(/zeus-bso) [default: none]"
        ),
    ] = None,
    tls_cert_file: Annotated[
        Path | None,
        typer.Option(help="PEM certificate: answer HTTPS (with --tls-key-file) [default: none]"),
    ] = None,
    tls_key_file: Annotated[
        Path | None, typer.Option(help="PEM private key of --tls-cert-file [default: none]")
    ] = None,
) -> None:
    """Start the server (creating or upgrading the database schema first)."""
    # Known before the settings load, so that an error in them is a JSON line too.
    json_lines = _is_json(log_format)
    # Ctrl-C while the database is prepared stops the server before it starts (a migration
    # ends or rolls back first); from uvicorn's start on, uvicorn handles it.
    with deferred_interrupt() as interrupt:
        try:
            settings = load_settings(
                SERVE_FLAGS,
                host=host,
                port=port,
                database_url=db,
                workers=workers,
                log_level=log_level,
                log_format=log_format,
                allow_unauthenticated=allow_unauthenticated or None,
                root_path=root_path,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
            )
            json_lines = settings.log_format == "json"  # a .env file may say so too
            handler = logging.StreamHandler()
            if settings.log_format == "json":
                handler.setFormatter(JsonFormatter())
            else:
                handler.setFormatter(
                    logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
                )
            logging.basicConfig(level=settings.log_level, handlers=[handler])
            logging.getLogger("alembic").setLevel(logging.WARNING)

            def announce(message: str) -> None:
                if settings.log_format == "json":  # every line of stderr a JSON object
                    logging.getLogger("zeus_bso_server").warning(message)
                else:
                    err.print(message, highlight=False, markup=False)

            _check_listen(settings)  # before the database is touched
            if not no_upgrade:
                before, after, _ = _migrate_schema(settings)
                if before != after:
                    announce(f"schema of {_display_url(settings)}: {before or 'empty'} -> {after}")
            else:  # refused here, with its exit status, rather than by the app as it starts
                _on_database(settings, check_schema)
        except ServerError as error:
            raise _fail(error, json_lines=json_lines) from None
        interrupt.abort_if_requested()

        # Worker processes build their settings from the environment: hand them the resolved ones.
        os.environ.update(
            {
                "ZEUS_BSO_DATABASE_URL": settings.database_url,
                "ZEUS_BSO_HOST": settings.host,
                "ZEUS_BSO_PORT": str(settings.port),
                "ZEUS_BSO_WORKERS": str(settings.workers),
                "ZEUS_BSO_LOG_LEVEL": settings.log_level,
                "ZEUS_BSO_LOG_FORMAT": settings.log_format,
                "ZEUS_BSO_ALLOW_UNAUTHENTICATED": str(settings.allow_unauthenticated).lower(),
                "ZEUS_BSO_ROOT_PATH": settings.root_path,
                "ZEUS_BSO_TLS_CERT_FILE": str(settings.tls_cert_file or ""),
                "ZEUS_BSO_TLS_KEY_FILE": str(settings.tls_key_file or ""),
            }
        )
        metrics: str | None = None
        if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # Every worker writes its metrics here; /metrics in any worker adds them all up.
            metrics = tempfile.mkdtemp(prefix="zeus-bso-metrics-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics
        below = f", served below {settings.root_path}" if settings.root_path else ""
        announce(
            f"zeus-bso {__version__} on {settings.scheme}://{settings.address}"
            f"{below} (dashboard at {settings.root_path}/dashboard, API docs at "
            f"{settings.root_path}/docs), database {_display_url(settings)}, "
            f"{settings.workers} worker(s)"
        )
        try:
            _run_uvicorn(settings, interrupt)
        finally:
            if metrics is not None:  # this server's alone: the next one counts from zero
                shutil.rmtree(metrics, ignore_errors=True)


def _check_listen(settings: Settings) -> None:
    """Bind the server's address and port as uvicorn will, and let go at once.

    Raises:
        ListenError: it cannot (said before the schema is migrated and the server announced;
            uvicorn would say it after both, in its own words, with a status of its own).
    """
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((settings.host, settings.port))
        except OSError as error:
            where = settings.address
            if error.errno == errno.EADDRINUSE:
                hint = "another process listens there: stop it, or pass another --port"
            elif error.errno in (errno.EACCES, errno.EPERM):
                hint = "ports below 1024 need privileges: pass a --port of 1024 or above"
            else:
                hint = "check --host (an address of this machine, e.g. 0.0.0.0 for every one)"
            raise ListenError(f"cannot listen on {where}: {error.strerror}; {hint}") from None


def _run_uvicorn(settings: Settings, interrupt: Interrupt) -> None:
    """``uvicorn.run``, with Ctrl-C handed from ``interrupt`` to uvicorn without a moment when
    it is lost: one process loads the app before uvicorn handles signals, and a Ctrl-C in
    between would otherwise raise wherever the import happened to be."""
    import uvicorn
    from uvicorn.importer import import_from_string

    options: dict[str, Any] = {
        "factory": True,
        "host": settings.host,
        "port": settings.port,
        "workers": settings.workers,
        "log_level": settings.log_level.lower(),
        "log_config": _log_config(settings.log_level, settings.log_format),
        "access_log": settings.log_level == "DEBUG",
        "timeout_keep_alive": settings.timeout_keep_alive,
        "limit_concurrency": settings.limit_concurrency,
        "root_path": settings.root_path,
        "ssl_certfile": settings.tls_cert_file,
        "ssl_keyfile": settings.tls_key_file,
    }
    if settings.workers > 1:  # the parent loads no app: its supervisor handles signals at once
        interrupt.hand_over(signal.default_int_handler)  # until then, Ctrl-C raises as usual
        uvicorn.run(APP, **options)
        return
    config = uvicorn.Config(APP, **options)
    server = uvicorn.Server(config)
    interrupt.hand_over(server.handle_exit)  # a Ctrl-C from now on stops the server
    import_from_string(APP)  # the app's modules, before uvicorn.Server.run imports them again
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run
        server.run()
    if not server.started:  # it could not listen: uvicorn.run's status
        sys.exit(STARTUP_FAILURE)


def _log_config(level: str, log_format: str = "text") -> dict[str, Any]:
    """uvicorn's logging configuration, plus our loggers (applied in every worker process)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"request_id": {"()": "zeus_bso_server.observability.RequestIdFilter"}}
    config["formatters"]["app"] = {
        "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
    }
    if log_format == "json":
        for name in ("app", "default", "access"):
            config["formatters"][name] = {"()": "zeus_bso_server.observability.JsonFormatter"}
    config["handlers"]["app"] = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "app",
        "filters": ["request_id"],
    }
    config["loggers"]["zeus_bso_server"] = {"handlers": ["app"], "level": level, "propagate": False}
    config["loggers"]["alembic"] = {"handlers": ["default"], "level": "WARNING"}
    return config


@app.command("openapi")
def openapi_command() -> None:
    """Print the server's OpenAPI schema (JSON; the repository keeps it as docs/openapi.json)."""
    from zeus_bso_server.api.app import create_app

    schema = create_app(Settings(database_url="sqlite:///unused.db")).openapi()
    typer.echo(json.dumps(schema, indent=2, sort_keys=True))


@db_app.command("upgrade")
def db_upgrade(
    db: DbOption = None,
    wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds to keep retrying while the database cannot be reached (a database "
            "container or pod that is still starting)",
        ),
    ] = 0,
) -> None:
    """Create the schema, or bring it to the current version."""
    _migrate_command(db, "head", down=False, wait=wait)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="Revision to go back to (see `db current`); 'base' drops all")
    ],
    db: DbOption = None,
) -> None:
    """Take the schema back to an older revision, keeping the data (to run an older server)."""
    _migrate_command(db, revision, down=True)


def _migrate_command(db: str | None, revision: str, *, down: bool, wait: float = 0) -> None:
    """Body of `db upgrade` and `db downgrade`: migrate, then print the revisions."""

    def announce(state: RetryCallState) -> None:
        if state.attempt_number == 1 and state.outcome is not None:
            err.print(
                f"waiting up to {wait:g} s for the database: {state.outcome.exception()}",
                markup=False,
                highlight=False,
            )

    retrying = Retrying(
        retry=retry_if_exception_type(DatabaseUnavailableError),
        stop=stop_after_delay(wait),
        wait=wait_fixed(1),
        before_sleep=announce,
        reraise=True,
    )
    try:
        settings = _database_settings(db)
        before, after, notices = retrying(_migrate_schema, settings, revision, down=down)
    except ServerError as error:
        raise _fail(error) from None
    for notice in notices:
        err.print(f"note: {notice}", markup=False, highlight=False)
    typer.echo(f"{_display_url(settings)}: {before or 'empty'} -> {after or 'empty'}")


@db_app.command(
    "copy", short_help="Copy the whole database into another, empty one (a move or a backup)."
)
def db_copy(
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The database to copy into, empty or new (postgresql://user:pw@host/db, "
            "sqlite:///path.db); it gets the current schema",
            show_default=False,
        ),
    ],
    db: DbOption = None,
) -> None:
    """Copy the whole database (every job, trial and power profile) into another, empty one:
    from SQLite to PostgreSQL when one machine is no longer enough, or a backup. The source
    stays as it is; a server may keep serving it (what it writes meanwhile is not copied)."""
    try:
        source = _database_settings(db)
        try:
            target = to_engine_url(to)
        except SettingsError as error:
            raise SettingsError(f"--to: {error.message}") from None
        shown = shown_url(target)
        if source.engine_url == target:
            raise SettingsError(f"--to names the source database, {shown}")
        path = DIALECTS[source.engine_url.get_backend_name()].database_file(source.engine_url)
        if path is not None and not path.is_file():
            raise SettingsError(f"no database to copy: {path} does not exist (see --db)")

        from zeus_bso_server.store.copy import Copied, copy_database

        async def copy_into(db: Database) -> Copied:
            into = Database(
                target,
                busy_timeout_ms=source.sqlite_busy_timeout_ms,
                lock_timeout_ms=source.lock_timeout_ms,
            )
            try:
                return await copy_database(db, into)
            finally:
                into.dispose()

        copied = _on_database(source, copy_into)
    except ServerError as error:
        raise _fail(error) from None
    counts = ", ".join(f"{rows} {table}" for table, rows in copied.rows.items())
    typer.echo(f"{_display_url(source)} -> {shown}: copied {counts}")
    if copied.running:
        running = sum(copied.running.values())
        jobs = ", ".join(f"{job} ({count})" for job, count in copied.running.items())
        err.print(
            f"note: {running} trial{'s' if running != 1 else ''} still running in the copy "
            f"({jobs}): a server that goes on serving the source takes their later reports. "
            "To move a server, stop it, copy, and start the new one at its address: the runs "
            "keep their reports until it answers, and deliver them there",
            markup=False,
            highlight=False,
        )


@db_app.command("current")
def db_current(db: DbOption = None) -> None:
    """Print the database's schema revision and the one this server needs."""
    try:
        settings = _database_settings(db)
        current = _on_database(settings, current_revision)
    except ServerError as error:
        raise _fail(error) from None
    typer.echo(f"current: {current or 'empty'}  needed: {HEAD}")


def _is_json(log_format: str | None) -> bool:
    """Whether ``log_format`` (or, when not given, ``ZEUS_BSO_LOG_FORMAT``) asks for JSON."""
    given = log_format if log_format is not None else os.environ.get("ZEUS_BSO_LOG_FORMAT", "")
    return given.strip().lower() == "json"


def _asks_json_logs(args: list[str]) -> bool:
    """Whether ``serve`` is asked for JSON logs on its command line or in the environment."""
    for index, arg in enumerate(args):
        if arg == "--log-format" and index + 1 < len(args):
            return _is_json(args[index + 1])
        if arg.startswith("--log-format="):
            return _is_json(arg.partition("=")[2])
    return _is_json(None)


_USAGE_ERROR: type[Exception] = getattr(typer, "TyperException", None) or next(
    kind for kind in typer.BadParameter.__mro__ if kind.__name__ == "ClickException"
)
"""What a usage error raises: typer's own base (typer 0.28 and later), else click's
``ClickException`` (click itself before typer 0.26, typer's own copy of it since)."""


def main() -> None:
    """Entry point of the ``zeus-bso-server`` command."""
    args = sys.argv[1:]
    if not (args[:1] == ["serve"] and _asks_json_logs(args)):
        command_of(app)()
        return
    # JSON logs: a usage error is a JSON line too (click would draw a box).
    try:
        status = command_of(app)(standalone_mode=False)  # the status of a typer.Exit, else None
    except typer.Abort:  # Ctrl-C before the server started
        raise SystemExit(EXIT_FAILURE) from None
    except _USAGE_ERROR as error:  # a usage error
        format_message = getattr(error, "format_message", None)
        message = format_message() if callable(format_message) else str(error)
        _fail(ServerError(str(message)), json_lines=True)
        raise SystemExit(getattr(error, "exit_code", EXIT_USAGE)) from None
    raise SystemExit(status if isinstance(status, int) else 0)
