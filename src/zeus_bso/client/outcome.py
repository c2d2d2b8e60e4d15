"""`RunOutcome`: how a run ended, for the script that ran it (``.converged``, ``.reason``) and for
the person who reads its output (`RunOutcome.summary`, one line with rounded figures)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from zeus_bso.client import failure
from zeus_bso.client.every_rank import every_rank_ran_out
from zeus_bso.client.memory import free_accelerator_memory, out_of_memory, out_of_memory_words
from zeus_bso.errors import BatchSizeDoesNotFitError, ConfigurationError, ZeusBSOTrainFailError
from zeus_bso.spec import StopReason
from zeus_bso.units import duration_text, energy_text

logger = logging.getLogger(__name__)

SHOWN_PREFIX = "zeus-bso: "

MUST_DELIVER: ContextVar[bool] = ContextVar("zeus_bso_must_deliver", default=False)
"""True while `until_converged` runs its last attempt: the run that asks for its batch size then
(in this process: the main process of a fit) tells the server it must deliver a model, and is
judged by the target and ``max_epochs`` alone."""


ATTEMPTS_LEFT: ContextVar[int] = ContextVar("zeus_bso_attempts_left", default=0)
"""The attempts `until_converged` has left after the one under way (0: none, or outside it): a
run that trained and delivered no model is followed by the next, and its line says so."""


@dataclass(frozen=True, slots=True)
class ReportAnswer:
    """What a report's answer says to the training loop: truthy when it should stop, so that
    ``if bso.report(accuracy): break`` reads as it always did."""

    stop: bool
    """Stop training: the server said so (or, without a server, the target or ``max_epochs``
    was reached)."""
    converged: bool = False
    """The run reached its target (with ``stop``)."""
    reason: StopReason | None = None
    """Why it stops (None while it goes on, and from servers that predate reasons)."""
    why: str | None = None
    """``reason`` in words."""
    cost: float | None = None
    """The run's cost so far (J), as the server priced it (None without a server)."""
    reported: bool = True
    """False where the metric was not measured at this validation (nothing was reported)."""

    def __bool__(self) -> bool:
        return self.stop


NOT_REPORTED = ReportAnswer(stop=False, reported=False)
"""The answer to a validation whose metric was not measured."""


@dataclass(frozen=True)
class RunOutcome:
    """How one run of a job ended."""

    job_id: str
    batch_size: int
    trial_number: int | None
    """The server's trial (None: the run trained without the server)."""
    converged: bool
    """Whether the run reached the job's target: a model is delivered."""
    reason: StopReason
    why: str
    """The reason in words."""
    epochs: int
    """Epochs reported (a restarted run's included)."""
    max_epochs: int
    seconds: float
    joules: float
    cost: float | None
    """The server's cost of the run (None: not known)."""
    next_run: str | None = None
    """What the job's next run gets, as the server says it (None: not known)."""
    next_refused: bool = False
    """Whether the server refuses the job's next run until the job changes (`next_run` says
    what to change)."""
    offline: bool = False
    """Whether the run trained without the server (it could not be reached at start)."""
    went_on: bool = False
    """Whether, its batch size out of memory, the run went on at a size of its framework's own
    (the HF Trainer's ``auto_find_batch_size``), outside the optimizer; ``converged`` then says
    whether that run reached the target."""
    accumulation_steps: int = 1
    """Micro-batches the run accumulated an optimizer step (``max_micro_batch_size``): above
    one, the batch size was reached by gradient accumulation, and the line says so."""
    shared_gpus: tuple[str, ...] = ()
    """The run's GPUs (UUIDs) that other processes computed on: their work is in its energy
    and cost (`zeus_bso.training.shared_gpus`), and the line says so."""
    continued_after: int | None = None
    """The epoch after which the run took over an earlier run's trial (a checkpoint's, or a run
    key's restart; 0: it trained the trial again from its first epoch): its time and energy
    include the earlier run's, and the line says so. None: the run began its trial."""
    again_as_it_is: bool = True
    """Whether the script, run again as it is, may deliver a model: False where the run ended on
    what the script must change (out of memory in evaluation; `why` says what)."""

    def summary(self) -> str:
        """One line, e.g. ``zeus-bso: batch size 128 stopped at epoch 5 of 15: its cost is 2.2x
        the cheapest run's; the model did not reach the target. Next run: 64.``"""
        size = f"batch size {self.batch_size}"
        if self.accumulation_steps > 1:
            micro = self.batch_size // self.accumulation_steps
            size += f" ({self.accumulation_steps} accumulated micro-batches of {micro})"
        spent = f"{duration_text(self.seconds)}, {energy_text(self.joules)}"
        trained = self.reason is not StopReason.NOT_TRAINED
        if not trained:
            line = f"{size} did not train: {self.why}"
            if self.epochs:  # a usage error after some epochs: it trained that far
                line = f"{size} ended at epoch {self.epochs} of {self.max_epochs}: {self.why}"
            if not self.offline:
                line += f" (not counted against {self.batch_size})"
        elif self.reason is StopReason.FAILED:
            line = f"{size} failed at epoch {self.epochs} of {self.max_epochs}: {self.why}"
        elif self.went_on:
            line = f"{size} stopped at epoch {self.epochs} of {self.max_epochs}: {self.why}"
            if not self.converged:
                line += f"; the run goes on outside the optimizer ({spent} so far)"
        elif self.converged:
            line = (
                f"{size} reached the target at epoch {self.epochs} of {self.max_epochs} ({spent})"
            )
        else:
            stopped = "ended" if self.reason is StopReason.ENDED_EARLY else "stopped"
            line = (
                f"{size} {stopped} at epoch {self.epochs} of {self.max_epochs}: {self.why};"
                f" the model did not reach the target ({spent})"
            )
        if self.shared_gpus and trained:
            held = ", ".join(self.shared_gpus)
            line += f"; other processes held {held} meanwhile: what they computed is in its energy"
        if self.continued_after is not None and trained:
            line += (
                f"; it continued an earlier run's trial after epoch {self.continued_after}"
                if self.continued_after
                else "; it trained an earlier run's trial again from its first epoch"
            ) + ", whose time and energy are included"
        if self.offline and trained:
            line += "; it trained without the server, which learned nothing from it"
        elif self.offline:
            line += "; the server could not be reached at its start"
        line += "."
        if self.next_run:
            line += f" Next run: {self.next_run}."
        again = not self.converged and trained and self.again_as_it_is
        if again and not self.went_on and not self.next_refused:
            # until_converged's next attempt, unless the run raised (it raises that error)
            follows = ATTEMPTS_LEFT.get() > 0 and not self.offline
            follows = follows and self.reason is not StopReason.FAILED
            line += " The next attempt follows." if follows else " Run it again for a model."
        return SHOWN_PREFIX + line


def show_on_stderr(line: str) -> None:
    """Print ``line`` to standard error (shown whatever logging is set up)."""
    print(line, file=sys.stderr, flush=True)


def until_converged(run: Callable[[], RunOutcome | None], attempts: int = 3) -> RunOutcome | None:
    """Run one recurrence of a job again and again, in this process, until a run delivers a
    model: ``run`` builds a fresh model and trainer, trains it with zeus-bso (each call gets the
    next batch size the server gives) and returns the run's outcome. Stops after a converged
    run, after a run that was not trained (a misconfiguration: trying again changes nothing),
    after a run without the server, or after ``attempts`` runs; returns the last outcome (None
    if ``run`` returned none, e.g. on a process other than the main one). A run that raised
    `BatchSizeDoesNotFitError` (the HF Trainer's batch size ran out of memory before it
    trained) counts as an attempt, and the next gets a size that fits; so does a run that ran
    out of memory while it trained (its trial is infeasible: the entry point said so, or the
    next run's start does where the framework called nothing, the HF Trainer without
    ``with callback:``, a loop without ``with bso:``), once what the run held is freed (the
    error's traceback is dropped, then the CUDA allocator's cache emptied: ``run`` must keep
    the model nowhere else, an Accelerator built outside it included; in a run of several
    processes, only where every process ran out: `zeus_bso.client.every_rank`), but not one
    that ran out in evaluation (the HF Trainer's, Lightning's validation: its batches are not
    the training's, and another batch size would run out the same way), whose error is raised;
    and a run that raised `ZeusBSOTrainFailError` (an entry point given
    ``raise_if_unconverged=True``). The last attempt must deliver: its run is judged by the
    job's target and ``max_epochs`` alone, never stopped on its cost (the server keeps it as
    ``must_deliver``; a run that asks for its batch size in another process, a ``ddp_spawn``
    child, is not told)::

        def recurrence() -> RunOutcome | None:
            callback = ZeusBSOCallback(server_url=..., job=job, monitor="val_acc")
            Trainer(max_epochs=job.max_epochs, callbacks=[callback]).fit(Model(), dm)
            return callback.outcome

        outcome = until_converged(recurrence, attempts=3)
        if outcome is not None and not outcome.converged:
            sys.exit(1)  # no model this recurrence: the scheduler sees a failed job

    Raises:
        ZeusBSOTrainFailError: the last run raised it: no attempt delivered a model (its
            ``outcome`` is the last run's).
        BatchSizeDoesNotFitError: the last attempt raised it.
        torch.OutOfMemoryError: the last attempt ran out of memory.
    """
    if attempts < 1:
        raise ConfigurationError(f"attempts must be at least 1, got {attempts}")
    outcome: RunOutcome | None = None
    for attempt in range(1, attempts + 1):
        last = MUST_DELIVER.set(attempt == attempts)  # the last attempt must deliver
        left = ATTEMPTS_LEFT.set(attempts - attempt)
        numbered = failure.ATTEMPT.set(object())  # this attempt's own
        ran_out = False
        try:
            outcome = run()
        except BatchSizeDoesNotFitError as err:  # infeasible now; the next run's size fits
            if attempt == attempts:
                raise
            logger.warning("zeus-bso: %s; starting the run again", err)
            continue
        except ZeusBSOTrainFailError as err:  # the run's own failure signal: an attempt
            failed = err.outcome if isinstance(err.outcome, RunOutcome) else None
            if attempt == attempts or failed is None or _last_attempt(failed):
                raise
            logger.warning("zeus-bso: no model from this run (%s); starting it again", failed.why)
            outcome = failed
            continue
        except Exception as err:  # out of memory while it trained
            if attempt == attempts or not out_of_memory(err):
                raise
            if failure.in_evaluation(err):  # another size would run out the same way
                logger.warning(
                    "zeus-bso: the run ran out of memory in evaluation (%s): not started again, "
                    "as a run at another batch size would run out the same way; %s",
                    out_of_memory_words(err),
                    failure.EVALUATION_ADVICE,
                )
                raise
            if not every_rank_ran_out():  # the others wait for this one in a collective
                logger.warning(
                    "zeus-bso: this process alone ran out of memory (%s): the run's other "
                    "processes wait for it in a collective of this attempt, and cannot start "
                    "the next one with it; its error is raised, and the next recurrence gets "
                    "a batch size that fits",
                    out_of_memory_words(err),
                )
                raise
            logger.warning(
                "zeus-bso: the run ran out of memory (%s): starting the run again, at a size "
                "that fits on these GPUs (one that trained on them before is tried first)",
                out_of_memory_words(err),
            )
            failure.caught(err)  # judges a run it left open; what its frames held is freed
            ran_out = True
        finally:
            MUST_DELIVER.reset(last)
            ATTEMPTS_LEFT.reset(left)
            failure.ATTEMPT.reset(numbered)
        if ran_out:  # the error handled: the failed run's tensors are unreachable now
            free_accelerator_memory()
            continue
        if outcome is None or outcome.converged or _last_attempt(outcome):
            break
    return outcome


def _last_attempt(outcome: RunOutcome) -> bool:
    """Whether trying again cannot help: a run that was not trained (a misconfiguration) or
    trained without the server."""
    return outcome.reason is StopReason.NOT_TRAINED or outcome.offline
