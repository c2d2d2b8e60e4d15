"""Faults the corpus injects into its scripts when a test's arguments ask for them: out of
memory at batches above a size, raised where a real one is (in the training step; from its
first step, or mid-run), and a kill,
SIGKILL, which no handler, ``finally`` or ``atexit`` sees: nothing more reaches the server.

A script kills itself at the start of an epoch (`kill_at_epoch`), after the epoch before was
reported and checkpointed, as a preemption without notice or the kernel's out-of-memory killer
would; or, asked to, after the epoch's report and before its checkpoint (the checkpoint is then
an epoch behind what the server was told). The Lightning ones do it with
`tests.scripts.lightning_faults`.
"""

from __future__ import annotations

import os
import signal
from typing import Any, NoReturn

import torch


def out_of_memory_above(limit: int, batch: torch.Tensor) -> None:
    """Raise CUDA's out-of-memory error for a ``batch`` of more than ``limit`` samples (0:
    never)."""
    if 0 < limit < len(batch):
        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {len(batch)} MiB")


class OutOfMemoryLater:
    """`out_of_memory_above` from the training step after the ``after``-th a model takes (the
    memory check's tried steps count): out of memory mid-run, as a run whose batches grow
    (longer sequences) or whose memory fragments meets it after the check passed."""

    def __init__(self, limit: int, after: int = 0) -> None:
        self.limit, self.after, self.steps = limit, after, 0

    def __call__(self, batch: torch.Tensor) -> None:
        self.steps += 1
        if self.steps > self.after:
            out_of_memory_above(self.limit, batch)


def kill() -> NoReturn:
    """SIGKILL this process."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("SIGKILL returned")  # never reached


def kill_at_epoch(kill_at: int, epoch: int) -> None:
    """Kill this process when it starts ``epoch`` (from 0), if it is ``kill_at`` (0: never)."""
    if 0 < kill_at <= epoch:
        kill()


def hf_kill_at_epoch(kill_at: int, after_report: bool = False) -> Any:
    """`kill_at_epoch` as a Hugging Face ``TrainerCallback``: at the start of an epoch, after
    the one before was evaluated and saved (``after_report``: when the epoch was evaluated and
    reported, before it is saved)."""
    import transformers

    class KillAtEpoch(transformers.TrainerCallback):
        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not after_report:
                kill_at_epoch(kill_at, round(state.epoch or 0))

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if after_report:  # after ZeusBSOTrainerCallback's (before it in the list)
                kill_at_epoch(kill_at, round(state.epoch or 0) - 1)

    return KillAtEpoch()
