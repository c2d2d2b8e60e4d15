"""The commands' entry points. Loading a command takes a moment (its models, tables, web
framework); Ctrl-C then ends it as it does later, with ``Aborted!`` and status 1, not with a
traceback from the middle of an import. Importing this package stays quick for that
(`zeus_bso.__getattr__`), and this module imports nothing of the project.

While a command loads, and while the server prepares its database, Ctrl-C is recorded rather
than raised (`deferred_interrupt`): a ``KeyboardInterrupt`` raised at an arbitrary moment can
land in a garbage collector's callback, where Python prints it and carries on, or in an event
loop that takes it for a cancellation; the command then went on as if never stopped (a server
started and served). A second Ctrl-C stops at once. A command started with Ctrl-C ignored (as a
shell without job control starts one in the background, ``command &``) keeps ignoring it, as
Python itself does."""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from contextlib import contextmanager

TYPE_CHECKING = False  # typing's would cost the start-up its import (see `zeus_bso.lazy`)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType
    from typing import Any


class Interrupt:
    """Whether Ctrl-C came while `deferred_interrupt` held it."""

    def __init__(self, *, held: bool) -> None:
        self.requested = False
        self.held = held
        """Whether the block holds Ctrl-C (only the main thread can handle signals, and one
        that the process was started ignoring stays ignored)."""

    def hand_over(self, handler: Callable[[int, FrameType | None], None]) -> None:
        """Let ``handler`` take Ctrl-C from now on (``Aborted!`` if one came already); the
        handler from before `deferred_interrupt` is back when its block ends. Outside the main
        thread, nothing is handed."""
        if self.held:
            signal.signal(signal.SIGINT, handler)  # first: a Ctrl-C after the check is not lost
        self.abort_if_requested()

    def abort_if_requested(self) -> None:
        """End the command as click does after Ctrl-C: ``Aborted!``, status 1."""
        if self.requested:
            abort()


def abort() -> None:
    sys.stderr.write("\nAborted!\n")
    raise SystemExit(1) from None


@contextmanager
def deferred_interrupt() -> Iterator[Interrupt]:
    """Record the first Ctrl-C (SIGINT) of the block instead of raising it; a second one raises
    ``KeyboardInterrupt`` at once. The handler from before is back when the block ends, so check
    `Interrupt.abort_if_requested` after it. Outside the main thread, signals cannot be handled,
    and where Ctrl-C is ignored it stays so: the block runs as it is."""
    main = threading.current_thread() is threading.main_thread()
    interrupt = Interrupt(held=main and signal.getsignal(signal.SIGINT) != signal.SIG_IGN)
    if not interrupt.held:
        yield interrupt
        return

    def record(signum: int, frame: FrameType | None) -> None:
        if interrupt.requested:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        interrupt.requested = True

    previous = signal.signal(signal.SIGINT, record)
    if previous is None:  # a handler set outside Python: Python's own is the nearest
        previous = signal.default_int_handler
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


def run_command(module: str, extra: str | None = None) -> None:
    """Import ``module`` and call its ``main``; Ctrl-C while it loads says ``Aborted!``. A
    command of an ``extra`` that is not installed says which (status 2, no traceback)."""
    try:
        with deferred_interrupt() as interrupt:
            try:
                command = importlib.import_module(module).main
            except ModuleNotFoundError as err:
                if extra is None or (err.name or "zeus_bso").startswith("zeus_bso"):
                    raise
                sys.stderr.write(
                    f"error: this command needs its extra (no module named {err.name!r}): "
                    f"pip install 'zeus-bso[{extra}]'\n"
                )
                raise SystemExit(2) from None  # EXIT_USAGE (this module imports nothing of ours)
        interrupt.abort_if_requested()
        command()
    except KeyboardInterrupt:  # a second Ctrl-C while it loaded, or one before click's own guard
        abort()


def main() -> None:
    """The ``zeus-bso`` command (`zeus_bso.cli.main`)."""
    run_command("zeus_bso.cli")


def installed_version() -> str:
    """The installed distribution's version, read from its metadata (``0+unknown`` for a source
    tree on ``sys.path``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zeus-bso")
    except PackageNotFoundError:
        return "0+unknown"


def version_option(program: str) -> Any:
    """The ``--version`` option of a command's Typer callback: prints ``PROGRAM VERSION`` and
    exits."""
    import typer

    def show(asked: bool) -> None:
        if asked:
            typer.echo(f"{program} {installed_version()}")
            raise typer.Exit

    return typer.Option(
        "--version", help="Print the version and exit", is_eager=True, callback=show
    )


def command_of(app: Any) -> Any:
    """The click command of the Typer ``app``, its flags shown as flags in ``--help``: typer
    (0.29) writes a flag's type beside it (``--json <bool>``, ``--help <bool>``), which reads
    as if the flag took a value (``--json true``: "Got unexpected extra argument")."""
    import typer.main

    command = typer.main.get_command(app)
    _plain_flags(command)
    return command


def _plain_flags(command: Any) -> None:
    """Give every flag of ``command`` and its subcommands (their ``--help`` too) an empty
    metavar, which typer's help shows instead of the flag's type."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _plain_flags(sub)
