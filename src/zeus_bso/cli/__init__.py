"""The ``zeus-bso`` command: trace-driven simulation (`zeus_bso.cli.simulate`) and a running
server's jobs (`zeus_bso.cli.jobs`)."""

from zeus_bso.cli.main import app, main
from zeus_bso.cli.simulate import simulate_flags

__all__ = ["app", "main", "simulate_flags"]
