"""The ``zeus-bso`` command's entry point. Loading the command takes a moment (its models,
tables and HTTP client); Ctrl-C then ends it as it does later, with ``Aborted!`` and status 1,
not with a traceback from the middle of an import. Importing this package stays quick for that
(`zeus_bso.__getattr__`)."""

from __future__ import annotations

import sys


def main() -> None:
    """Load the command, then run it (`zeus_bso.cli.main`)."""
    try:
        from zeus_bso.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        raise SystemExit(1) from None
    command()
