"""How energy and time are written for people, the same everywhere: a run's line, ``zeus-bso
jobs summary`` and the dashboard. Rounded to what reads (``0.2 s``, ``4.2 kJ``, ``2.5 h``,
``10.00 kWh``); the exact figures stay in the data (JSON, the dashboard's tooltips)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable


def duration_text(seconds: float) -> str:
    """Seconds as ``0.2 s``, ``42 s``, ``61.7 min``, ``2.5 h`` or ``1,250.0 h``."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 9.95:  # a short run (a CPU example) reads "0.2 s", not "0 s"
        return f"{sign}{seconds:.1f} s"
    if seconds < 90:
        return f"{sign}{seconds:.0f} s"
    if seconds < 5400:
        return f"{sign}{seconds / 60:.1f} min"
    return f"{sign}{seconds / 3600:,.1f} h"


def energy_text(joules: float) -> str:
    """Joules as ``0.5 J``, ``52 J``, ``4.2 kJ``, ``0.31 kWh`` or ``1,234.57 kWh``."""
    if not math.isfinite(joules):
        return f"{joules} J"
    sign, joules = ("-" if joules < 0 else ""), abs(joules)
    if joules < 9.95:
        return f"{sign}{joules:.1f} J"
    if joules < 999.5:  # not "1000 J"
        return f"{sign}{joules:.0f} J"
    if joules < 3.6e5:
        return f"{sign}{joules / 1e3:.1f} kJ"
    return f"{sign}{joules / 3.6e6:,.2f} kWh"


def percent_text(value: float) -> str:
    """A percentage's figure to one decimal, with thousands separators (``12.5``, ``3,950.0``:
    a job that spent 40 times its default's cost), without its ``%``."""
    return f"{value:,.1f}"


def energy_unit(joules: Iterable[float | None]) -> Callable[[float | None], str]:
    """How a column of energies (or costs, in joules) is written: each in one unit, so that a
    column compares at a glance (``233.1 kJ`` above ``0.14 kWh`` read as the dearer of the
    two); a missing value as ``-``. The unit is the one `energy_text` gives the smallest
    magnitude among ``joules`` but those below a thousandth of the largest (a spread of a few
    joules beside kWh), and 0: none rounds to nothing that matters."""
    finite = [abs(j) for j in joules if j is not None and math.isfinite(j) and j != 0]
    least = min((j for j in finite if j >= max(finite) / 1000), default=0.0)
    name, scale, digits = "J", 1.0, 0
    if least >= 3.6e5:
        name, scale, digits = "kWh", 3.6e6, 2
    elif least >= 999.5:
        name, scale, digits = "kJ", 1e3, 1
    elif least < 9.95:
        digits = 1

    def text(value: float | None) -> str:
        if value is None:
            return "-"
        if not math.isfinite(value):
            return f"{value} J"
        return f"{value / scale:,.{digits}f} {name}"

    return text
