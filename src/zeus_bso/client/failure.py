"""A run that raised: whose doing it was, so that only what the batch size did is charged to it.

- Out of memory is the batch size's: infeasible on the run's hardware profile
  (`zeus_bso.client.memory.out_of_memory`); but not in evaluation (`in_evaluation`), whose
  batches are not the training's (the HF Trainer's ``per_device_eval_batch_size``) and whose
  memory the training's batch size does not decide (logits gathered on the GPU): released.
- An interruption is nobody's: Ctrl-C (``KeyboardInterrupt``), or a SIGTERM turned into an
  exception (a preemption, a ``kill``, a cluster's time limit: our `Terminated`, or the
  exception of a framework that handles SIGTERM itself, Lightning's ``SIGTERMException``, which
  its adapter names to the session). The trial is released, or left open for the restart of a
  run with a run key.
- A usage error of ours (`ConfigurationError`), or any error before the run trained, is the
  script's: released.
- Any other error while training is the run's: failed, which counts against the batch size
  (``max_unreported_failures`` failed runs of a size in a pruning round drop it).
"""

from __future__ import annotations

import signal
import weakref
from contextvars import ContextVar
from enum import StrEnum
from types import CodeType
from typing import Protocol

from zeus_bso.client.memory import out_of_memory, out_of_memory_words
from zeus_bso.errors import ConfigurationError
from zeus_bso.spec import StopReason

SigtermExceptions = tuple[type[BaseException], ...]
"""The exceptions a framework that handles SIGTERM itself raises on it (Lightning's
``SIGTERMException``), given by its adapter."""


TERMINATED_STATUS = 128 + signal.SIGTERM
"""The exit status of a process that SIGTERM ended (143), as a shell reports it."""


class Terminated(SystemExit):
    """SIGTERM, raised in a run's main thread (`zeus_bso.client.sigterm`): the process ends
    with status 143, as SIGTERM would have ended it, after its run's trial was released."""

    def __init__(self) -> None:
        super().__init__(TERMINATED_STATUS)

    def __str__(self) -> str:
        return "SIGTERM"


def give_sigterm_status(error: BaseException, sigterm: SigtermExceptions) -> None:
    """A framework's SIGTERM exception (one of ``sigterm``) without an exit status gets
    SIGTERM's (143): Lightning's
    ``SIGTERMException`` is a ``SystemExit`` without one before its fix of
    Lightning-AI/pytorch-lightning#19916, so a preempted fit exited 0, as if it had finished,
    and a scheduler would not run the recurrence again."""
    if not isinstance(error, SystemExit) or not isinstance(error, sigterm):
        return
    if error.code is None:
        error.code = TERMINATED_STATUS


def interrupted(error: BaseException, sigterm: SigtermExceptions = ()) -> bool:
    """Whether ``error`` interrupted the run from outside: Ctrl-C or a SIGTERM (ours, or a
    framework's: one of ``sigterm``)."""
    return isinstance(error, (KeyboardInterrupt, Terminated, *sigterm))


class Verdict(StrEnum):
    """Whose doing a run's error was (`verdict`), and so how its trial ends."""

    OUT_OF_MEMORY = "out_of_memory"
    """The batch size's: infeasible on the run's hardware profile."""
    INTERRUPTED = "interrupted"
    """Nobody's: released, or left open for the restart of a run with a run key."""
    NOT_CHARGED = "not_charged"
    """The script's: released."""
    EVALUATION = "evaluation"
    """Out of memory in evaluation, the script's: released, as a run that ended early."""
    FAILED = "failed"
    """The run's: failed, which counts against the batch size."""


_EVALUATION_CODE: set[CodeType] = set()
"""The code of the frameworks' evaluation loops (`evaluation_code`)."""

_IN_EVALUATION: weakref.WeakSet[BaseException] = weakref.WeakSet()
"""The errors an adapter saw raised in evaluation (`raised_in_evaluation`)."""


def evaluation_code(*code: CodeType) -> None:
    """A framework's evaluation runs ``code`` (the HF Trainer's ``evaluate``, given by its
    adapter): an error raised through it was raised in evaluation (`in_evaluation`)."""
    _EVALUATION_CODE.update(code)


def raised_in_evaluation(error: BaseException) -> None:
    """``error`` was raised in evaluation (an adapter that knows it: Lightning's callback, from
    the trainer's state)."""
    _IN_EVALUATION.add(error)


def in_evaluation(error: BaseException) -> bool:
    """Whether ``error`` was raised in evaluation: an adapter said so, or its traceback passes
    through a framework's evaluation (`evaluation_code`)."""
    if error in _IN_EVALUATION:
        return True
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code in _EVALUATION_CODE:
            return True
        trace = trace.tb_next
    return False


def _ran_out(error: BaseException) -> BaseException | None:
    """The out-of-memory error ``error`` is, or was raised from (the HF Trainer raises its own
    over one in evaluation under ``auto_find_batch_size``, which would shrink the training
    batch); None: neither."""
    for found in (error, error.__cause__):
        if found is not None and out_of_memory(found):
            return found
    return None


def evaluation_ran_out(error: BaseException) -> bool:
    """Whether ``error`` is out of memory raised in evaluation (`_ran_out`), which says nothing
    of the training's batch size."""
    return _ran_out(error) is not None and in_evaluation(error)


EVALUATION_ADVICE = (
    "lower the evaluation's batch size (the HF Trainer's per_device_eval_batch_size, the "
    "validation DataLoader's) or what it keeps on the GPU (the HF Trainer's "
    "eval_accumulation_steps)"
)
"""What to change after out of memory in evaluation."""


def verdict(error: BaseException, *, trained: bool, sigterm: SigtermExceptions = ()) -> Verdict:
    """Whose doing ``error`` was, for a run that raised it (``trained``: after it trained;
    ``sigterm``: a framework's SIGTERM exceptions)."""
    if evaluation_ran_out(error):
        return Verdict.EVALUATION
    if out_of_memory(error):
        return Verdict.OUT_OF_MEMORY
    if interrupted(error, sigterm):
        return Verdict.INTERRUPTED
    if isinstance(error, ConfigurationError) or not trained:
        return Verdict.NOT_CHARGED
    return Verdict.FAILED


class Ending(Protocol):
    """A run's ways to end (the main process's side of a run,
    `zeus_bso.training.server_run.ServerRun`), one a verdict."""

    def end_out_of_memory(self, why: str | None = None) -> None: ...

    def end_interrupted(self, why: str) -> None: ...

    def release(self, why: str, reason: StopReason = StopReason.NOT_TRAINED) -> None: ...

    def abort(self, why: str | None = None) -> None: ...


def end_as(run: Ending, judged: Verdict, why: str) -> None:
    """End ``run`` as ``judged``: infeasible, interrupted, released or failed."""
    if judged is Verdict.OUT_OF_MEMORY:
        run.end_out_of_memory(why)
    elif judged is Verdict.INTERRUPTED:
        run.end_interrupted(why)
    elif judged is Verdict.NOT_CHARGED:
        run.release(why)
    elif judged is Verdict.EVALUATION:
        run.release(why, StopReason.ENDED_EARLY)
    else:
        run.abort(why)


ATTEMPT: ContextVar[object | None] = ContextVar("zeus_bso_attempt", default=None)
"""The attempt of `zeus_bso.client.outcome.until_converged` under way, an object of its own
(None: none)."""

_CAUGHT: list[tuple[BaseException, object | None]] = []
"""The error `caught` last, with the attempt it came out of (at most one)."""


def caught(error: BaseException) -> None:
    """``error`` came out of the attempt under way (`ATTEMPT`), and the process caught it and
    goes on (`zeus_bso.client.outcome.until_converged` starts the next attempt): a run that
    opened in that attempt and was left open (one whose framework calls nothing when training
    raises: the HF Trainer's, or a loop's without a ``with``) is judged by it when the next
    run starts (`last_caught`, read by `zeus_bso.training.open_runs`); a run opened before the
    attempt is not. It is kept without its traceback (nor its chained errors'): the frames it
    came through, and the closures they ran, held what the run held (the model, its
    activations, the optimizer's state), which must be freed before the next run builds its
    own; clearing the frames' locals would not free what a closure's cells hold."""
    chained: BaseException | None = error
    seen: set[int] = set()
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__
    _CAUGHT[:] = [(error, ATTEMPT.get())]


def last_caught() -> tuple[BaseException, object | None] | None:
    """The error `caught` last, and the attempt it came out of; None: none was."""
    return _CAUGHT[0] if _CAUGHT else None


def described(error: BaseException) -> str:
    """``error`` in words: its type, and its message where it has one (``KeyboardInterrupt``,
    not ``KeyboardInterrupt: ``); `Terminated` is ``SIGTERM``."""
    if isinstance(error, Terminated):
        return "SIGTERM"
    if (ran_out := _ran_out(error)) is not None and in_evaluation(error):
        return (
            f"ran out of memory in evaluation ({out_of_memory_words(ran_out)}), not counted "
            f"against its batch size: {EVALUATION_ADVICE}"
        )
    if out_of_memory(error):
        return out_of_memory_words(error)  # without PyTorch's allocator breakdown and advice
    words = str(error)
    return f"{type(error).__name__}: {words}" if words else type(error).__name__
