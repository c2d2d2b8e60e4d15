"""Where the Hugging Face callback runs among its Trainer's callbacks: first, so that the cost it
adds to an evaluation's metrics reaches the reporting integrations; and the Trainer that calls
an event, whose training data the callback checks before the Trainer trains, and whose loss its
memory check takes."""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

_FRAMES_UP = 4
"""How far up the stack the handler that calls an event is looked for (it is the caller's
caller: ``CallbackHandler.call_event``, called by ``on_init_end`` or ``on_train_begin``)."""


def run_first(callback: Any) -> list[Any] | None:
    """Move ``callback`` to the front of the callbacks of the Trainer's ``CallbackHandler`` that
    is calling one of its events (call this from an event of ``callback``'s).

    The Trainer puts the reporting integrations (W&B, MLflow, TensorBoard, ...) before the
    callbacks it is given, and hands an evaluation's metrics to every callback's ``on_log``
    before ``on_evaluate``. Run first, the callback adds the cost to those metrics before the
    integrations log them. Callbacks are not handed the Trainer or its handler: the handler is
    the one whose ``call_event`` called this event, found on the stack a few frames up.
    Moving the callback within the list the handler is walking calls every other callback once
    still. Returns the handler's callbacks (None: no handler found).
    """
    from transformers.trainer_callback import CallbackHandler

    frame: FrameType | None = sys._getframe(1)
    for _ in range(_FRAMES_UP):
        if frame is None:
            break
        handler = frame.f_locals.get("self")
        if isinstance(handler, CallbackHandler):
            callbacks: list[Any] = handler.callbacks
            if callback in callbacks and callbacks[0] is not callback:
                callbacks.remove(callback)
                callbacks.insert(0, callback)
            return callbacks
        frame = frame.f_back
    logger.debug(
        "zeus-bso: no CallbackHandler calls this event: the callback stays where it is, after "
        "the reporting integrations (they log an evaluation before its cost is added)"
    )
    return None


def calling_trainer(depth: int = 6) -> Any | None:
    """The ``transformers.Trainer`` that calls the event this is called from (``on_init_end``:
    its ``__init__`` is a few frames up, the caller of its callback handler; ``on_train_begin``:
    its training loop). None: none found."""
    from transformers import Trainer

    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        found = frame.f_locals.get("self")
        if isinstance(found, Trainer):
            return found
        frame = frame.f_back
    return None
