"""Hugging Face Trainer runs whose ``trainer.train()`` ended without a word to the callback.

The Trainer calls no callback when ``train()`` raises. In a process that goes on after the
error (a worker, a service or a notebook that trains one job after another) without
``with callback:`` around the training, such a run stays open, its heartbeat keeping its trial
in flight, until the process exits (a later run of the same job ends it, `open_runs`). A run
whose training began (``on_train_begin``) and never ended (``on_train_end``), and whose
Trainer's ``train()`` frame is no longer on its thread's stack, is over: the next run that starts in
the process, of any job, ends it. Its error is the one the interpreter set aside since its
training began (``sys.last_value``, a notebook cell's, or the one `zeus_bso.until_converged`
caught), where that came through the training's code; else none is known, and it is ended as
interrupted.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from zeus_bso.training.open_runs import SetAside, error_since, set_aside

_FRAMES_UP = 10
"""How far up the stack from ``on_train_begin`` the Trainer's frames are looked for: its loop
calls the callback handler, which calls the event; ``train()`` calls the loop (through
``auto_find_batch_size``'s wrapper, where that is set)."""


@dataclass(frozen=True)
class _Training:
    thread: int
    """The thread the Trainer's loop runs on."""
    frame: int
    """The ``id`` of the Trainer's frame (not the frame: it would keep its locals alive)."""
    code: CodeType
    """That frame's code (with ``frame``, it names that frame and no later one)."""
    set_aside: SetAside
    """The errors set aside when the training began (`zeus_bso.training.open_runs.set_aside`)."""


_TRAINING: weakref.WeakKeyDictionary[Any, _Training] = weakref.WeakKeyDictionary()
"""Each callback between its ``on_train_begin`` and its run's end."""


def began(callback: Any) -> None:
    """``callback``'s training began (call from its ``on_train_begin``): the outermost frame
    of the Trainer's found up the stack (``train()``, which lasts the whole training however
    the Trainer's loop is split into helpers) is watched. Nothing is watched where no frame of
    a Trainer's is found."""
    from transformers import Trainer

    frame: FrameType | None = sys._getframe(1)
    trainer: Any = None
    outermost: FrameType | None = None
    for _ in range(_FRAMES_UP):
        if frame is None:
            break
        found = frame.f_locals.get("self")
        if isinstance(found, Trainer) and (trainer is None or found is trainer):
            trainer, outermost = found, frame
        frame = frame.f_back
    if outermost is not None:
        _TRAINING[callback] = _Training(
            threading.get_ident(), id(outermost), outermost.f_code, set_aside()
        )


def ended(callback: Any) -> None:
    """``callback``'s run ended: its training is no longer watched."""
    _TRAINING.pop(callback, None)


def _running(training: _Training) -> bool:
    """Whether the Trainer's frame is still on its thread's stack (its thread gone: no)."""
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
    for callback, training in list(_TRAINING.items()):
        if callback is but or _running(training):
            continue
        _TRAINING.pop(callback, None)
        found.append((callback, error_since(training.set_aside)))
    return found
