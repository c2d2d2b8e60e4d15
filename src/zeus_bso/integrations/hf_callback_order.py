"""Where the Hugging Face callback runs among its Trainer's callbacks: first, so that the cost it
adds to an evaluation's metrics reaches the reporting integrations."""

from __future__ import annotations

import gc
from typing import Any


def run_first(callback: Any) -> None:
    """Move ``callback`` to the front of its Trainer's callbacks.

    The Trainer puts the reporting integrations (W&B, MLflow, TensorBoard, ...) before the
    callbacks it is given, and hands an evaluation's metrics to every callback's ``on_log``
    before ``on_evaluate``. Run first, the callback adds the cost to those metrics before the
    integrations log them. The list is the ``CallbackHandler``'s that holds the callback
    (callbacks are not handed the Trainer); moving it within the list the Trainer is walking
    calls every other callback once still.
    """
    from transformers import TrainerCallback

    for holder in gc.get_referrers(callback):
        if (
            isinstance(holder, list)
            and holder
            and holder[0] is not callback
            and all(isinstance(item, TrainerCallback) for item in holder)
            and any(
                getattr(owner, "callbacks", None) is holder for owner in gc.get_referrers(holder)
            )
        ):
            holder.remove(callback)
            holder.insert(0, callback)
