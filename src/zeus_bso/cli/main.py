"""``zeus-bso``: tools for users of the optimizer: trace-driven simulation
(`zeus_bso.cli.simulate`), a running server's jobs (`zeus_bso.cli.jobs`), its power limits
(`zeus_bso.cli.power`) and what a training run here would find (`zeus_bso.cli.check`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from zeus_bso.cli.check import check_command
from zeus_bso.cli.jobs import jobs_app
from zeus_bso.cli.power import power_app
from zeus_bso.cli.simulate import PlainHelpCommand, expand_multi_value_options, simulate_command
from zeus_bso.entry import command_of, version_option
from zeus_bso.errors import EXIT_STATUSES

app = typer.Typer(
    help="zeus-bso: learn the cheapest batch size of recurring training jobs.",
    epilog=EXIT_STATUSES,
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _main(version: Annotated[bool, version_option("zeus-bso")] = False) -> None:
    """zeus-bso: learn the cheapest batch size of recurring training jobs."""


# The command is `zeus-bso simulate`; the function's name avoids shadowing `sim.simulate`.
app.command(name="simulate", cls=PlainHelpCommand)(simulate_command)
app.add_typer(jobs_app, name="jobs")
app.add_typer(power_app, name="power")
app.command(name="check", short_help="Check what a training run here would find; changes nothing.")(
    check_command
)


def main() -> None:
    """Entry point of the ``zeus-bso`` command."""
    sys.argv[1:] = expand_multi_value_options(sys.argv[1:], {"--seeds"})
    command_of(app)()
