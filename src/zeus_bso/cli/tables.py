"""Tables for people: compact, and fitted to the terminal by leaving columns out whole rather
than folding their cells ("band/it") or cutting them ("pruni…")."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

COMPACT: dict[str, Any] = {
    "box": box.SIMPLE_HEAD,
    "show_edge": False,
    "collapse_padding": True,
    "pad_edge": False,
}
"""Tables without vertical lines: a job's trials (ten columns) fit an 80-column terminal."""

RECENT_S = 180 * 86400
"""Within this many seconds of now, a time is shown with its hour (as ``ls -l`` shows it)."""


def when(seconds: float, now: float | None = None) -> str:
    """A time as ``ls -l`` shows one: ``Dec 01 10:18`` within about six months of now,
    ``Dec 01  2025`` further away (in the future included), in local time."""
    now = time.time() if now is None else now
    local = time.localtime(seconds)
    if abs(now - seconds) < RECENT_S:
        return time.strftime("%b %d %H:%M", local)
    return time.strftime("%b %d  %Y", local)


def print_fitted(
    console: Console,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    keep: Sequence[str],
    *,
    err: Console,
    hint: str,
) -> None:
    """Prints a table of ``rows`` (cells in the order of ``columns``, none of them folded),
    leaving out columns to fit ``console``'s width: the last of ``keep``, which lists the
    columns in the order they are worth keeping, goes first; the first is never left out. Where
    any are left out of rows, ``err`` names them, with ``hint`` (where to see them all). Where
    the output is no terminal and ``COLUMNS`` is not set (a pipe, a file), nothing is left
    out."""
    width = console.width if console.is_terminal or "COLUMNS" in os.environ else None
    unbounded = console.options.update_width(1_000_000)
    shown = list(keep)
    while True:
        table = Table(*(Column(name, no_wrap=True) for name in columns if name in shown), **COMPACT)
        for row in rows:
            table.add_row(*(cell for name, cell in zip(columns, row, strict=True) if name in shown))
        wide = Measurement.get(console, unbounded, table).maximum
        if width is None or wide <= width or len(shown) == 1:
            # At its own width: wider than the console where it needs to be (the first
            # column's whole cells; a pipe), which the terminal, if any, wraps. The console's
            # own width comes back after (None: the terminal's, read at each print).
            own = console._width
            console.width = max(wide, console.width)
            try:
                console.print(table)
            finally:
                console._width = own
            left_out = [name for name in columns if name not in shown]
            if rows and left_out:
                err.print(f"left out to fit the terminal: {', '.join(left_out)} ({hint})")
            return
        shown.pop()
