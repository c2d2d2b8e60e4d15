"""`zeus_bso.integrations.hf_eval_sets`: which of an HF Trainer's evaluations at a step the
report waits out, and when a round of them ended without the run's metric. The Trainer itself
runs them in the test corpus (``tests/scripts/hf_trainer.py --eval-sets``)."""

from __future__ import annotations

from zeus_bso.integrations.hf_eval_sets import EvaluationRound, evaluated_apart


def timed(prefix: str, **values: float) -> dict[str, float]:
    """An evaluation's metrics as the Trainer gives them: prefixed, with their time."""
    return {f"{prefix}_{name}": value for name, value in {**values, "runtime": 0.1}.items()}


def test_an_evaluation_apart_is_named_by_its_prefix() -> None:
    assert evaluated_apart(timed("eval_held_out", accuracy=0.8)) == "eval_held_out"
    assert evaluated_apart(timed("test", accuracy=0.8)) == "test"
    assert evaluated_apart(timed("eval", accuracy=0.8)) is None  # the Trainer's one dataset
    assert evaluated_apart({"eval_accuracy": 0.8}) is None  # a script's own, untimed


def test_the_datasets_before_the_metrics_one_are_waited_out() -> None:
    round_ = EvaluationRound("eval_held_out_accuracy")
    assert round_.waits(10, timed("eval_seen", accuracy=0.9))
    assert not round_.waits(10, timed("eval_held_out", accuracy=0.8))  # reported at 10
    assert round_.unreported(10) is None


def test_a_round_without_the_metric_names_every_datasets_metrics() -> None:
    round_ = EvaluationRound("eval_accuracy")
    assert round_.waits(10, timed("eval_seen", accuracy=0.9))
    assert round_.waits(10, timed("eval_held_out", accuracy=0.8))
    missing = round_.unreported(5)  # the last report was at an earlier step
    assert missing is not None
    assert {"eval_seen_accuracy", "eval_held_out_accuracy"} <= set(missing)
    assert round_.unreported(5) is None  # forgotten once said


def test_a_scripts_own_evaluation_mid_training_is_not_the_jobs() -> None:
    """``trainer.evaluate(test_set, metric_key_prefix="test")`` from a script's callback, at
    a step the Trainer evaluates nothing: waited out, and not a refusal."""
    round_ = EvaluationRound("eval_accuracy")
    assert round_.waits(7, timed("test", accuracy=0.7))
    assert round_.unreported(5) is None
