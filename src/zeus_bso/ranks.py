"""Decisions made on rank 0 and shared with every rank of a distributed run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from zeus_bso import clean_exit
from zeus_bso.errors import ZeusBSOError

T = TypeVar("T")


def from_rank_zero(broadcast: Callable[[Any], Any], is_zero: bool, work: Callable[[], T]) -> T:
    """Run ``work`` on rank 0 and give every rank its result, or its error.

    ``broadcast`` sends a picklable object from rank 0 to every rank and returns it there (the
    framework's broadcast). An error on rank 0 is sent too: rank 0 raises it and every other
    rank raises a `ZeusBSOError` naming it, instead of waiting in the next collective.
    """
    clean_exit.register_at_exit()  # the broadcast's tensors may outlive it on gloo's threads
    value: Any = None
    error: Exception | None = None
    if is_zero:
        try:
            value = work()
        except Exception as err:  # every error is shared, then raised again
            error = err
    sent = f"{type(error).__name__}: {error}" if error is not None else None
    value, message = broadcast((value, sent))
    if error is not None:
        raise error
    if message is not None:
        raise ZeusBSOError(f"rank 0 failed, so this rank stops too: {message}")
    return value  # type: ignore[no-any-return]
