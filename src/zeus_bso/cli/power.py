"""``zeus-bso power``: the GPU power limits of this node.

``zeus-bso power restore`` puts GPUs back at the limit their record says, else the operator's
(``operator.json`` in the records folder), else their default: for a Slurm epilog, a Kubernetes
preStop hook or a node agent, after runs a container's end or a cgroup's kill took down with
their watchdogs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from zeus_bso.errors import EXIT_USAGE, ZeusBSOError

power_app = typer.Typer(
    help="The GPU power limits of this node: restore.", no_args_is_help=True, add_completion=False
)
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


@power_app.command("restore", short_help="Put this node's GPUs back at their target power limit.")
def restore_command(
    gpu: Annotated[
        list[str] | None,
        typer.Option("--gpu", help="A GPU's UUID (repeat it for several), or 'all' (the default)"),
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            envvar="ZEUS_BSO_POWER_RECORDS",
            help="The node's folder of power-limit records (default: /run/zeus-bso/power-limits)",
        ),
    ] = None,
) -> None:
    """Put GPUs back at their record's limit, else the operator's, else their default, and
    delete their records (needs root, as setting a limit does)."""
    from zeus_bso.client.power import records_folder
    from zeus_bso.power.limits import restore_gpus

    uuids = None if not gpu or "all" in gpu else gpu
    folder = records if records is not None else records_folder()
    try:
        done = restore_gpus(folder, uuids)
    except ZeusBSOError as error:
        err.print(f"zeus-bso power restore: {error}", markup=False, highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    failed = 0
    for item in done:
        if item.error is not None:
            failed += 1
            line = f"{item.uuid}: not restored to {item.after_w:g} W ({item.why}): {item.error}"
            err.print(line, markup=False, highlight=False)
        elif round(item.before_w * 1000) == round(item.after_w * 1000):
            console.print(f"{item.uuid}: at {item.after_w:g} W ({item.why})", markup=False)
        else:
            line = f"{item.uuid}: {item.before_w:g} W -> {item.after_w:g} W ({item.why})"
            console.print(line, markup=False, highlight=False)
    if failed:
        raise typer.Exit(1)
