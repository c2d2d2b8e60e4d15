"""RunOutcome.summary: the line a run prints, its figures rounded for the reader."""

from __future__ import annotations

import pytest

from zeus_bso.client.outcome import RunOutcome
from zeus_bso.spec import StopReason


def outcome(seconds: float, joules: float) -> RunOutcome:
    return RunOutcome(
        job_id="job-1",
        batch_size=64,
        trial_number=3,
        converged=True,
        reason=StopReason.CONVERGED,
        why="it reached the target (0.95 >= 0.9)",
        epochs=4,
        max_epochs=20,
        seconds=seconds,
        joules=joules,
        cost=joules,
    )


@pytest.mark.parametrize(
    ("seconds", "joules", "spent"),
    [
        (0.174, 0.52, "(0.2 s, 0.5 J)"),  # a CPU example's run: never "0 s, 1 J"
        (9.4, 52.2, "(9.4 s, 52 J)"),
        (42.0, 4200.0, "(42 s, 4.2 kJ)"),
        (3700.0, 1.1e6, "(61.7 min, 0.31 kWh)"),
        (9000.0, 3.6e7, "(2.5 h, 10.00 kWh)"),
    ],
)
def test_the_summary_rounds_time_and_energy_to_what_reads(
    seconds: float, joules: float, spent: str
) -> None:
    line = outcome(seconds, joules).summary()
    assert line.startswith("zeus-bso: batch size 64 reached the target at epoch 4 of 20 ")
    assert spent in line
