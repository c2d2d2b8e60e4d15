"""A run's memory check on every process (`MemoryCheck`), and its steps: a size tried
everywhere at once (`try_everywhere`), and whether out of memory is the size's doing at all
(`smallest_fits`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from zeus_bso.client.memory import (
    free_accelerator_memory,
    out_of_memory,
    out_of_memory_words,
    smallest_to_try,
)
from zeus_bso.errors import BatchSizeDoesNotFitError, ZeusBSOError
from zeus_bso.training.collectives import Collectives
from zeus_bso.training.server_run import ServerRun


def try_everywhere(
    collectives: Collectives, size: int, try_steps: Callable[[int], None]
) -> str | None:
    """Run ``try_steps(size)`` on every process; the first out-of-memory error's words (any
    process's), or None when it fit everywhere. Another error is raised on every process."""
    oom: str | None = None
    failed: Exception | None = None
    try:
        try_steps(size)
    except Exception as err:
        if out_of_memory(err):
            oom = out_of_memory_words(err)
            free_accelerator_memory()
        else:
            failed = err
    said = None if failed is None else f"{type(failed).__name__}: {failed}"
    results = collectives.all_gather((oom, said))
    if failed is not None:
        raise failed
    errors = [message for _, message in results if message is not None]
    if errors:
        raise ZeusBSOError(f"another process failed while trying batch size {size}: {errors[0]}")
    ooms = [message for message, _ in results if message is not None]
    return ooms[0] if ooms else None


def smallest_fits(
    collectives: Collectives,
    size: int,
    batch_sizes: Sequence[int],
    accumulates: bool,
    try_steps: Callable[[int], None],
) -> int | None:
    """``size`` ran out of memory on some process: the smallest size (the job's smallest
    batch size, or micro-batches of one sample where the run accumulates) is tried on every
    process. None: it fits, and running out was ``size``'s doing; else the smallest size
    tried (``size`` itself where none is smaller), which ran out too: not the size's doing."""
    smallest = smallest_to_try(size, list(batch_sizes), accumulates)
    if smallest is not None and try_everywhere(collectives, smallest, try_steps) is None:
        return None
    return size if smallest is None else smallest


class CheckedRun(Protocol):
    """What the memory check asks of a run's session (`zeus_bso.training.session.TrialSession`)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def micro_batch_size(self) -> int: ...

    @property
    def memory_unknown(self) -> bool: ...

    def memory_fits(self) -> None:
        """The check found that the run's batch size fits (every process)."""
        ...

    def on_main(self, act: Callable[[ServerRun], object]) -> None:
        """``act`` on the main process's side of the run; its error is raised everywhere."""
        ...

    def next_size_after_out_of_memory(self, why: str | None = None) -> int: ...

    def release(self, why: str) -> None: ...

    def end_out_of_memory(self, why: str | None = None, *, goes_on: bool = False) -> None: ...


@dataclass(frozen=True)
class MemoryCheck:
    """A run's memory check before it trains, on every process at once (the session's
    ``fit_in_memory`` and ``check_memory`` say what each does)."""

    run: CheckedRun
    collectives: Collectives
    batch_sizes: Sequence[int]
    accumulates: bool
    """Whether the run may accumulate gradients (``max_micro_batch_size`` is set)."""

    def fit(self, try_steps: Callable[[int], None]) -> int:
        """Try sizes until one fits; the size each process's DataLoader takes."""
        run = self.run
        while run.memory_unknown:
            oom = try_everywhere(self.collectives, run.micro_batch_size, try_steps)
            if oom is None:
                run.memory_fits()
                break
            self._check_any_size_fits(oom, try_steps)
            run.next_size_after_out_of_memory(oom)
        return run.micro_batch_size

    def check(self, try_steps: Callable[[int], None], *, goes_on: bool) -> None:
        """Try the run's size; where it does not fit, end the run and raise."""
        run = self.run
        if not run.memory_unknown:
            return
        micro = run.micro_batch_size
        oom = try_everywhere(self.collectives, micro, try_steps)
        if oom is None:
            run.memory_fits()
            return
        self._check_any_size_fits(oom, try_steps)
        if self.accumulates and micro > 1:
            # Smaller micro-batches reach the batch size: the next run takes them.
            run.on_main(lambda server: server.micro_batch_out_of_memory(oom))
            why = f"micro-batches of {micro} ran out of memory on these GPUs ({oom})"
            run.release(f"{why}; the next run takes smaller ones")  # before it trained
            raise BatchSizeDoesNotFitError(f"{why}; the next run takes smaller ones")
        run.end_out_of_memory(oom, goes_on=goes_on)
        raise BatchSizeDoesNotFitError(
            f"batch size {run.batch_size} ran out of memory on these GPUs ({oom}); it is "
            "infeasible on them now, and the next run gets a batch size that fits"
        )

    def _check_any_size_fits(self, oom: str, try_steps: Callable[[int], None]) -> None:
        """The size ran out of memory (``oom``) on some process: the smallest size (the job's
        smallest batch size, or micro-batches of one sample where the run accumulates) is
        tried on every process; where it runs out too, the out-of-memory error is not the batch
        size's doing: the trial is released, no memory cap is set, and every process raises.

        Raises:
            OutOfMemoryNotTheBatchSizeError: on every process, the smallest size ran out too.
        """
        size = smallest_fits(
            self.collectives,
            self.run.micro_batch_size,
            self.batch_sizes,
            self.accumulates,
            try_steps,
        )
        if size is not None:  # raises everywhere
            self.run.on_main(lambda server: server.not_the_batch_size(oom, size))
