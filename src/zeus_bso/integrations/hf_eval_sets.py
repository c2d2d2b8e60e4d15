"""An evaluation of several datasets: the Hugging Face Trainer given ``eval_dataset`` as a dict
evaluates each in turn, and hands each one's metrics, prefixed with its name
(``eval_<name>_accuracy``), to its callbacks apart. The run's metric is among one dataset's
only: the evaluations of the others at the same step are waited out (`EvaluationRound`)."""

from __future__ import annotations

from collections.abc import Mapping


def dataset_name(metrics: Mapping[str, float]) -> str | None:
    """The name of the evaluation dataset whose metrics these are (an ``eval_dataset`` dict's
    key: the Trainer times each evaluation, ``eval_<name>_runtime``); None: the Trainer's one
    dataset (``eval_runtime``), or metrics without their time (a script's own)."""
    for key in metrics:
        if key.startswith("eval_") and key.endswith("_runtime") and key != "eval_runtime":
            return key.removeprefix("eval_").removesuffix("_runtime")
    return None


class EvaluationRound:
    """The evaluations of one step that did not hold the run's metric: the datasets evaluated
    before the one whose metrics hold it, or all of them, where none does."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.step: int | None = None
        self.metrics: dict[str, float] = {}

    def waits(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Whether the report waits for the next dataset's evaluation at ``step``: the metric
        is not among ``metrics``, which are a named dataset's (`dataset_name`). They are kept
        for `unreported`."""
        if self.metric in metrics or dataset_name(metrics) is None:
            return False
        if self.step != step:
            self.step, self.metrics = step, {}
        self.metrics.update(metrics)
        return True

    def unreported(self, reported_step: int | None) -> dict[str, float] | None:
        """Where the round of evaluations that waited ended without the metric (no report at
        its step, ``reported_step`` the step of the last report): every metric the round's
        datasets gave, to name them; None: it ended with a report, or none waited. Called
        when the Trainer goes on (the next step, the end of training), it forgets the round."""
        step, metrics = self.step, self.metrics
        self.step, self.metrics = None, {}
        return metrics if step is not None and step != reported_step else None
