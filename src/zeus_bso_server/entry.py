"""The ``zeus-bso-server`` command's entry point: `zeus_bso_server.cli.main`, loaded as
`zeus_bso.entry.run_command` loads a command (Ctrl-C while it loads says ``Aborted!``; without
the ``server`` extra it says to install it)."""

from __future__ import annotations

from zeus_bso.entry import run_command


def main() -> None:
    """The ``zeus-bso-server`` command."""
    run_command("zeus_bso_server.cli", extra="server")
