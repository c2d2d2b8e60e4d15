"""The ``zeus-bso-server`` command's entry point. Loading the command takes a moment (the web
framework, the database layer); Ctrl-C then ends it as it does later, with ``Aborted!`` and
status 1, not with a traceback from the middle of an import."""

from __future__ import annotations

import sys


def main() -> None:
    """Load the command, then run it (`zeus_bso_server.cli.main`)."""
    try:
        from zeus_bso_server.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        raise SystemExit(1) from None
    command()
