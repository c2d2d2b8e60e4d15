"""An evaluation of several datasets: the Hugging Face Trainer given ``eval_dataset`` as a dict
evaluates each in turn, and hands each one's metrics, prefixed with its name
(``eval_<name>_accuracy``), to its callbacks apart; so does a script's own
``trainer.evaluate(dataset, metric_key_prefix="test")`` while it trains. The run's metric is
among one evaluation's only: the others at the same step are waited out (`EvaluationRound`)."""

from __future__ import annotations

from collections.abc import Mapping


def evaluated_apart(metrics: Mapping[str, float]) -> str | None:
    """The prefix of an evaluation's metrics other than the Trainer's one dataset's (the
    Trainer times each evaluation, ``<prefix>_runtime``): ``eval_<name>``, an ``eval_dataset``
    dict's key, or a script's own ``metric_key_prefix``. None: the Trainer's one dataset
    (``eval_runtime``), or metrics without their time (a script's own)."""
    for key in metrics:
        if key.endswith("_runtime") and key != "eval_runtime":
            return key.removesuffix("_runtime")
    return None


class EvaluationRound:
    """The evaluations of one step that did not hold the run's metric: the datasets evaluated
    before the one whose metrics hold it, or all of them, where none does."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.step: int | None = None
        self.metrics: dict[str, float] = {}

    def waits(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Whether the report waits for the next evaluation at ``step``: the metric is not
        among ``metrics``, which are one evaluated apart (`evaluated_apart`). They are kept for
        `unreported`."""
        if self.metric in metrics or evaluated_apart(metrics) is None:
            return False
        if self.step != step:
            self.step, self.metrics = step, {}
        self.metrics.update(metrics)
        return True

    def unreported(self, reported_step: int | None) -> dict[str, float] | None:
        """Where the round of evaluations that waited ended without the metric (no report at
        its step, ``reported_step`` the step of the last report) and held the Trainer's own
        (``eval_...``: a script's own evaluation alone is not the job's): every metric the
        round gave, to name them; None: it ended with a report, or none waited. Called when the
        Trainer goes on (the next step, the end of training), it forgets the round."""
        step, metrics = self.step, self.metrics
        if step is None:  # none waited (every step of the run: nothing to forget)
            return None
        self.step, self.metrics = None, {}
        if step == reported_step:
            return None
        return metrics if any(key.startswith("eval_") for key in metrics) else None
