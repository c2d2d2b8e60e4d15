"""Hugging Face Trainer runs whose ``trainer.train()`` ended without a word to the callback.

The Trainer calls no callback when ``train()`` raises. In a process that goes on after the
error (a worker, a service or a notebook that trains one job after another) without
``with callback:`` around the training, such a run stays open, its heartbeat keeping its trial
in flight, until the process exits (a later run of the same job ends it, `open_runs`). A run
whose training began (``on_train_begin``) and never ended (``on_train_end``), and whose
Trainer loop's frame is no longer on its thread's stack, is over: the next run that starts in
the process, of any job, ends it. Its error is the one the interpreter set aside since its
training began (``sys.last_value``, a notebook cell's), where that came through the training's
code; else none is known, and it is ended as interrupted.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from zeus_bso.training.open_runs import raised_in_training

_FRAMES_UP = 8
"""How far up the stack from ``on_train_begin`` the Trainer's loop is looked for (it calls the
callback handler, which calls the event)."""


@dataclass(frozen=True)
class _Training:
    thread: int
    """The thread the Trainer's loop runs on."""
    frame: int
    """The ``id`` of the loop's frame (not the frame: it would keep the loop's locals alive)."""
    code: CodeType
    """The loop frame's code (with ``frame``, it names that frame and no later one)."""
    set_aside: object
    """``sys.last_value`` when the training began."""


_TRAINING: weakref.WeakKeyDictionary[Any, _Training] = weakref.WeakKeyDictionary()
"""Each callback between its ``on_train_begin`` and its run's end."""


def began(callback: Any) -> None:
    """``callback``'s training began (call from its ``on_train_begin``): the Trainer's loop,
    found up the stack, is watched. Nothing is watched where no Trainer's frame is found."""
    from transformers import Trainer

    frame: FrameType | None = sys._getframe(1)
    for _ in range(_FRAMES_UP):
        if frame is None:
            return
        if isinstance(frame.f_locals.get("self"), Trainer):
            _TRAINING[callback] = _Training(
                threading.get_ident(), id(frame), frame.f_code, getattr(sys, "last_value", None)
            )
            return
        frame = frame.f_back


def ended(callback: Any) -> None:
    """``callback``'s run ended: its training is no longer watched."""
    _TRAINING.pop(callback, None)


def _running(training: _Training) -> bool:
    """Whether the Trainer's loop is still on its thread's stack (its thread gone: no)."""
    frame: FrameType | None = sys._current_frames().get(training.thread)
    while frame is not None:
        if id(frame) == training.frame and frame.f_code is training.code:
            return True
        frame = frame.f_back
    return False


def unheard(but: Any) -> list[tuple[Any, BaseException | None]]:
    """The callbacks, ``but`` aside, whose training ended unheard, each with the error that
    ended it where one is known (see the module's docstring); they are no longer watched."""
    found = []
    now = getattr(sys, "last_value", None)
    for callback, training in list(_TRAINING.items()):
        if callback is but or _running(training):
            continue
        _TRAINING.pop(callback, None)
        error = now if now is not training.set_aside and isinstance(now, BaseException) else None
        found.append((callback, error if error is not None and raised_in_training(error) else None))
    return found
