"""The ``zeus-bso`` command: trace-driven simulation (`zeus_bso.cli.main`) and a running
server's jobs (`zeus_bso.cli.jobs`)."""

from zeus_bso.cli.main import app, main, simulate_flags

__all__ = ["app", "main", "simulate_flags"]
