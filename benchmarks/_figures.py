"""What the benchmarks' figures share: the commit they were measured at, and percentiles."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The repository's commit (short), or ``unknown`` outside a checkout."""
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return found.stdout.strip() or "unknown"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0 to 100) of ``values``: the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
