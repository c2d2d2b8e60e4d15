"""Whose doing a run's error was (`zeus_bso.client.failure`): out of memory in evaluation is
not the training batch size's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from zeus_bso.client import failure

torch = pytest.importorskip("torch", reason="out of memory is torch's error")


def run_out() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def evaluate(error: BaseException | None = None) -> None:
    """A framework's evaluation (named to `failure.evaluation_code` below)."""
    if error is not None:
        raise error
    run_out()


def train_step() -> None:
    run_out()


def raised(step: Callable[[], None]) -> BaseException:
    try:
        step()
    except BaseException as err:  # the error is what is judged
        return err
    raise AssertionError("nothing raised")


def test_out_of_memory_raised_through_an_evaluations_code_releases_the_run() -> None:
    failure.evaluation_code(evaluate.__code__)
    in_evaluation, in_training = raised(evaluate), raised(train_step)
    assert failure.verdict(in_evaluation, trained=True) is failure.Verdict.EVALUATION
    assert failure.verdict(in_training, trained=True) is failure.Verdict.OUT_OF_MEMORY
    assert "per_device_eval_batch_size" in failure.described(in_evaluation)
    # Another error raised there is the run's, as anywhere.
    other = raised(lambda: evaluate(ValueError("a bug in the metric")))
    assert failure.verdict(other, trained=True) is failure.Verdict.FAILED


def test_an_adapter_that_knows_says_so() -> None:
    """Lightning's callback knows from the trainer's state (its validation loop's code is
    shared by every function of its decorator)."""
    error = raised(train_step)
    assert not failure.in_evaluation(error)
    failure.raised_in_evaluation(error)
    assert failure.verdict(error, trained=False) is failure.Verdict.EVALUATION
