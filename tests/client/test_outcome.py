"""RunOutcome.summary: the line a run prints, its figures rounded for the reader."""

from __future__ import annotations

import pytest

from zeus_bso.client.outcome import RunOutcome
from zeus_bso.spec import StopReason
from zeus_bso.units import duration_text, energy_text


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


def test_a_run_that_accumulated_says_so() -> None:
    """With ``max_micro_batch_size`` the line named only the batch size: it says the
    micro-batches that reached it."""
    from dataclasses import replace

    line = replace(outcome(9.4, 52.2), accumulation_steps=2).summary()
    assert line.startswith(
        "zeus-bso: batch size 64 (2 accumulated micro-batches of 32) reached the target at epoch 4"
    )
    assert "micro-batches" not in outcome(9.4, 52.2).summary()


@pytest.mark.parametrize(
    ("continued", "said"),
    [
        (2, "; it continued an earlier run's trial after epoch 2, whose time and energy are "),
        (0, "; it trained an earlier run's trial again from its first epoch, whose time and "),
    ],
)
def test_a_run_that_took_over_an_earlier_runs_trial_says_so(continued: int, said: str) -> None:
    """A run resumed from a checkpoint (or restarted with its run key) reports the trial's
    epochs, time and energy since it began, the earlier run's included: its line says so."""
    from dataclasses import replace

    line = replace(outcome(9.4, 52.2), continued_after=continued).summary()
    assert line.startswith("zeus-bso: batch size 64 reached the target at epoch 4 of 20 ")
    assert said in line
    assert "earlier run" not in outcome(9.4, 52.2).summary()


@pytest.mark.parametrize(
    ("joules", "text"),
    [
        (0.0, "0.0 J"),
        (9.96, "10 J"),  # rounds into the next form, not "10.0 J"
        (999.4, "999 J"),
        (999.6, "1.0 kJ"),
        (3.59e5, "359.0 kJ"),
        (3.6e5, "0.10 kWh"),
        (4.444e9, "1,234.44 kWh"),  # a fleet's total
        (-4200.0, "-4.2 kJ"),  # a saving that was a loss: the sign, then the unit of its size
        (float("nan"), "nan J"),
    ],
)
def test_energy_reads_in_the_unit_of_its_size(joules: float, text: str) -> None:
    assert energy_text(joules) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0 s"),
        (89.4, "89 s"),
        (5399.0, "90.0 min"),
        (4.5e6, "1,250.0 h"),
        (-120.0, "-2.0 min"),
    ],
)
def test_time_reads_in_the_unit_of_its_size(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_refused_next_run_reads_as_one_sentence_without_run_it_again() -> None:
    outcome = RunOutcome(
        job_id="j",
        batch_size=64,
        trial_number=2,
        converged=False,
        reason=StopReason.MAX_EPOCHS,
        why="it trained the job's max_epochs (2)",
        epochs=2,
        max_epochs=2,
        seconds=3.0,
        joules=900.0,
        cost=900.0,
        next_run="refused: no batch size converged in pruning round 1 (tried [32, 64]); "
        "change the job: lower target_metric",
        next_refused=True,
    )
    line = outcome.summary()
    assert line.endswith("Next run: refused: no batch size converged in pruning round 1 (tried "
                         "[32, 64]); change the job: lower target_metric.")  # fmt: skip
    assert "Run it again" not in line
    assert "refused (refused" not in line


def test_a_released_run_says_how_far_it_trained() -> None:
    """A usage error after some epochs (an epoch reported twice) releases the trial: the line
    said "did not train" of a run that had trained; it says where it ended, and a run released
    before any epoch still says it did not train."""
    from dataclasses import replace

    released = replace(
        outcome(9.4, 52.2),
        converged=False,
        reason=StopReason.NOT_TRAINED,
        why="ConfigurationError: epoch 1 is not after the 1 epochs already reported",
        epochs=1,
    )
    line = released.summary()
    assert line.startswith("zeus-bso: batch size 64 ended at epoch 1 of 20: ConfigurationError")
    assert "(not counted against 64)." in line
    assert "Run it again" not in line
    assert "did not train: " in replace(released, epochs=0).summary()
