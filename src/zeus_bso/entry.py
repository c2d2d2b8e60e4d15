"""The commands' entry points. Loading a command takes a moment (its models, tables, web
framework); Ctrl-C then ends it as it does later, with ``Aborted!`` and status 1, not with a
traceback from the middle of an import. Importing this package stays quick for that
(`zeus_bso.__getattr__`), and this module imports nothing of the project."""

from __future__ import annotations

import importlib
import sys


def run_command(module: str) -> None:
    """Import ``module`` and call its ``main``; Ctrl-C while it loads says ``Aborted!``."""
    try:
        command = importlib.import_module(module).main
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        raise SystemExit(1) from None
    command()


def main() -> None:
    """The ``zeus-bso`` command (`zeus_bso.cli.main`)."""
    run_command("zeus_bso.cli")
