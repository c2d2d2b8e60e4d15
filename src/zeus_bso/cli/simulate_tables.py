"""The tables ``zeus-bso simulate`` prints (`zeus_bso.cli.simulate`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from zeus_bso.sim.report import HORIZONS, Summary, causes_rows, horizon_rows


def _report_table(title: str, caption: str | None = None, **options: Any) -> Table:
    """A table of the simulation's report, its title and caption from the left: on a terminal
    narrower than the title, rich centres each wrapped line, and the last word stood alone in
    the middle."""
    return Table(
        title=title, caption=caption, title_justify="left", caption_justify="left", **options
    )


def print_summaries(console: Console, summaries: list[Summary]) -> None:
    """Each workload's cost against the oracle's and its savings, why runs cost more, and the
    regret at each horizon."""
    table = _report_table("Cumulative cost / oracle's, and savings against the default batch size")
    for column in ("workload", "gpu", "default", "oracle"):
        table.add_column(column)
    for column in ("regret", "seeds (min-max)", "savings"):
        table.add_column(column, justify="right")
    for s in summaries:
        ratios = [x.total / (s.recurrences * s.oracle_cost) for x in s.seeds]
        table.add_row(
            s.workload,
            s.gpu,
            str(s.default_batch_size),
            str(s.oracle_batch_size),
            f"{s.regret:.3f}",
            f"{min(ratios):.3f}-{max(ratios):.3f}",
            f"{s.savings * 100:+.1f}%",
        )
    if len(summaries) > 1:
        mean = sum(s.regret for s in summaries) / len(summaries)
        table.add_row("mean", "", "", "", f"{mean:.3f}", "", "")
    console.print(table)
    header, rows = causes_rows(summaries)
    caption = (
        "floor: the regret of running the default once, then the oracle; expl.: "
        "pruning explorations; stopped: before the target; noise: the trace's spread"
    )
    if any(s.power_oracle is not None for s in summaries):
        caption += (
            "; with power limits, the points are over the oracle of runs that profile (the "
            "cheapest batch size at its chosen limit: its regret in the power table), and the "
            "floor starts at the default's profiling run"
        )
    causes = _report_table(
        "Where the regret goes: points of excess cost (% of the oracle's cumulative cost)",
        caption=caption,
        box=box.SIMPLE_HEAD,  # nine columns: within 80 columns of a terminal, headers whole
        show_edge=False,
        padding=(0, 0),
    )
    for i, column in enumerate(header):
        label = column.replace(" ", "\n", 1)  # "bandit off oracle": "bandit", "off oracle"
        causes.add_column(label, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        causes.add_row(*row)
    console.print(causes)
    if summaries[0].recurrences > HORIZONS[0]:
        header, rows = horizon_rows(summaries)
        horizons = _report_table(
            "Regret / floor at fewer recurrences",
            caption="worst vs default: the dearest workload against the default always",
            box=box.SIMPLE_HEAD,
            show_edge=False,
        )
        for i, column in enumerate(header):
            horizons.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
        for row in rows:
            horizons.add_row(*row)
        console.print(horizons)


def print_out_of_memory(console: Console, summaries: list[Summary]) -> None:
    """What running out of memory cost: the starts at sizes that did not fit, per seed."""
    table = _report_table(
        "Out of memory: starts at sizes that did not fit (each costs one start)",
        caption="at most one start per size and GPU: after it, the size is infeasible there "
        "(accumulating: micro-batches stay below it)",
    )
    for column in ("workload", "memory cap", "oracle", "starts per seed", "most a size"):
        table.add_column(column)
    for s in summaries:
        starts = s.out_of_memory_starts()
        most = max((count for seed in starts for count in seed.values()), default=0)
        table.add_row(
            s.workload,
            f"{s.memory_cap}{' (accumulating)' if s.accumulate else ''}",
            str(s.oracle_batch_size),
            " ".join(str(sum(seed.values())) for seed in starts),
            str(most),
        )
    console.print(table)


def print_power(console: Console, summaries: list[Summary]) -> None:
    """Power limits: regret against the batch-size-only oracle at the maximum power, beside
    the joint oracle's."""
    table = _report_table(
        "Power limits: cumulative cost / the batch-size-only oracle's at maximum power",
        caption="profiling oracle: the cheapest batch size at the limit its profile chose; "
        "joint oracle: the best batch size and power limit together, every recurrence",
    )
    columns = ("workload", "gpu", "with profiling", "floor", "profiling oracle", "joint oracle")
    for column in columns:
        table.add_column(column, justify="left" if column in ("workload", "gpu") else "right")
    for s in summaries:
        joint = s.joint_oracle_regret
        table.add_row(
            s.workload,
            s.gpu,
            f"{s.regret:.3f}",
            f"{s.floor:.3f}",
            f"{s.charged_from:.3f}",
            "" if joint is None else f"{joint:.3f}",
        )
    console.print(table)
