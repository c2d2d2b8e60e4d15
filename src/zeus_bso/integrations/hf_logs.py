"""What `ZeusBSOTrainerCallback` adds to the Hugging Face Trainer's logs, for its reporting
integrations (``report_to``) and ``state.log_history`` (``trainer_state.json``): beside each
training log's ``learning_rate`` (the schedule's), ``bso_lr``, the rate the steps take at the
run's batch size; beside each evaluation's metrics, the server's ``bso_cost`` and the run's
``bso_energy_j``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def log_stepped_rate(state: Any, logs: dict[str, float], factor: float | None) -> None:
    """Beside the Trainer's ``learning_rate`` in ``logs``, the rate its steps take, ``factor``
    times it (None: no ``lr_rule``): for the integrations after the callback, and in
    ``state.log_history``, where the Trainer put a copy of the logs before its callbacks saw
    them."""
    rate = logs.get("learning_rate")
    if factor is None or not isinstance(rate, int | float):
        return
    logs["bso_lr"] = float(rate) * factor
    last = state.log_history[-1] if state.log_history else {}
    if last.get("step") == state.global_step and last.get("learning_rate") == rate:
        last["bso_lr"] = logs["bso_lr"]


def log_report(
    state: Any, metrics: dict[str, float], reported: Mapping[str, float], main: bool
) -> None:
    """The server's figures of a report (``reported``: none while it is unreachable) beside the
    evaluation's ``metrics``, and in ``state.log_history`` on the world process zero
    (``main``)."""
    if "bso/cost" not in reported:
        return
    metrics["bso_cost"] = reported["bso/cost"]
    metrics["bso_energy_j"] = reported["bso/energy_j"]
    if main:
        state.log_history.append({**reported, "epoch": state.epoch, "step": state.global_step})
