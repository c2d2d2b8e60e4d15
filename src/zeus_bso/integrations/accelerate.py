"""`ZeusBSOAccelerate`: zeus-bso in a hand-written Hugging Face Accelerate training loop.

::

    accelerator = Accelerator(log_with="tensorboard", project_dir="runs")
    with ZeusBSOAccelerate(accelerator, server_url=..., job=JobSpec(...)) as bso:
        loader = DataLoader(train, batch_size=bso.batch_size, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        bso.train_begin()
        for epoch in range(job.max_epochs):
            train_one_epoch(...)
            if bso.report(validate(...)):  # every process, after every validation
                break

Every process calls every method (see `zeus_bso.training.TrialSession`); the server's cost, the
energy and the batch size of each report go to the Accelerator's trackers (``accelerator.log``).
``accelerator.save_state`` writes the run's trial into the checkpoint, and
``accelerator.load_state`` refuses a checkpoint of another trial: a run restarted from one
continues its trial with ``ZeusBSOAccelerate(..., resume=checkpoint_dir)``.

A loop inside Accelerate's ``find_executable_batch_size`` (its example ``memory.py``), which after
an out-of-memory error trains again at a smaller size of its own, is seen by the DataLoader it
prepares then: the batch size is marked out of memory on these GPUs, and the run goes on outside
the optimizer (`zeus_bso.integrations.shrunk_run.ShrunkRun`), at its size's learning rate.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import Unpack, override

from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations.loaders import batch_size_of
from zeus_bso.integrations.loop_checkpoints import check_restore
from zeus_bso.integrations.shrunk_run import ShrunkRun
from zeus_bso.lazy import require
from zeus_bso.options import JobLike
from zeus_bso.training import ReportAnswer
from zeus_bso.training.collectives import from_rank_zero
from zeus_bso.training.server_run import ServerRun
from zeus_bso.training.session import TrialSession
from zeus_bso.training.session_options import SessionOptions
from zeus_bso.training.techniques import techniques_of
from zeus_bso.training.trained_models import remember, trained_here
from zeus_bso.training.trial_file import trial_in, write_trial

logger = logging.getLogger(__name__)

require("accelerate", "ZeusBSOAccelerate needs Accelerate", "accelerate")


class ZeusBSOAccelerate(TrialSession):
    """Chooses the batch size of an Accelerate training loop and says when to stop.

    Args:
        accelerator: the loop's ``accelerate.Accelerator`` (its process group, if several
            processes, exists once it is built).
        server_url: the zeus-bso server (default: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (its ``job_id`` may be
            left out: see `BatchSizeOptimizer`).
        options: `SessionOptions`, passed on to `zeus_bso.training.TrialSession`. With
            ``max_micro_batch_size``, the DataLoader takes ``bso.micro_batch_size`` and the
            accelerator's ``gradient_accumulation_steps`` is set to ``bso.accumulation_steps``
            (wrap each step in ``accelerator.accumulate(model)``) until the run ends, when the
            accelerator gets its own back (a later run with it starts from that); without it,
            an accelerator
            that accumulates of its own is refused (each optimizer step would take more than
            the server's batch size).

    The run's one-line summary is printed at the end through ``accelerator.print`` (the main
    process's).
    """

    def __init__(
        self,
        accelerator: Any,
        server_url: str | None = None,
        job: JobLike | None = None,
        **options: Unpack[SessionOptions],
    ) -> None:
        steps = accelerator.gradient_accumulation_steps
        if options.get("max_micro_batch_size") is None and steps != 1:
            raise ConfigurationError(  # before the server is asked: no trial is left open
                f"Accelerator(gradient_accumulation_steps={steps}): each optimizer step would "
                f"take {steps} batches of the size the server charges; to accumulate, pass "
                "max_micro_batch_size=... to ZeusBSOAccelerate and leave the accelerator's "
                "gradient_accumulation_steps at 1 (it is set to bso.accumulation_steps)"
            )
        processes = accelerator.num_processes
        if getattr(accelerator, "split_batches", False) and processes > 1:
            raise ConfigurationError(  # before the server is asked
                f"Accelerator(split_batches=True) splits each batch of the DataLoader across its "
                f"{processes} processes, so each would train 1/{processes} of the batch size "
                "the server charges it: leave split_batches False (each process's DataLoader "
                "takes bso.batch_size)"
            )
        self.accelerator = accelerator
        self._loaders_seen: weakref.WeakSet[Any] = weakref.WeakSet()  # prepared, looked at
        self._own_accumulation = steps  # given back at the end: a later run starts from it
        self._hooks: list[Any] = []  # a session that ends as it starts has none to remove
        main = bool(accelerator.is_main_process)
        super().__init__(main, accelerator.log, server_url, job, show=accelerator.print, **options)
        self._shrunk = ShrunkRun(self._job, "metric", "the loop", logger)  # the loop's sizes
        self._accumulate()
        self._hooks = [
            accelerator.register_save_state_pre_hook(self._saving),
            accelerator.register_load_state_pre_hook(self._loading),
        ]

    def _saving(self, models: Any, weights: Any, output_dir: str) -> None:
        """``accelerator.save_state``: the run's trial goes into the checkpoint (main process),
        so that a run restored from it continues the trial."""
        saved = self.checkpoint()
        if saved:
            write_trial(Path(output_dir), saved)

    def _loading(self, models: Any, input_dir: str) -> None:
        """``accelerator.load_state``: the checkpoint must hold this run's trial (a run
        constructed with ``resume=`` the checkpoint's directory continues it)."""
        check_restore(
            self,
            lambda: trial_in(Path(input_dir)),
            f"accelerator.load_state({input_dir!r})",
            f"pass resume={input_dir!r} to ZeusBSOAccelerate",
        )

    @override
    def _ending(self, on_main: Callable[[ServerRun], None], *, close: bool = True) -> None:
        for model in self._prepared_models():  # a later run of the job may not train them so
            remember(model, self)
        for hook in self._hooks:  # a later run with this accelerator checkpoints its own trial
            hook.remove()
        self._hooks = []
        if self._max_micro_batch_size is not None:  # the accelerator's own, for a later run
            self.accelerator.gradient_accumulation_steps = self._own_accumulation
        super()._ending(on_main, close=close)

    @override
    def train_begin(self, steps_per_epoch: int | None = None) -> None:
        """`TrialSession.train_begin`, once the loop's DataLoaders are prepared: where none of
        them takes the run's batch size, the main process says so (`_loaders_said`); where the
        loop prepared them again since, at a smaller size, it went on at that size
        (`_went_on`)."""
        if self._went_on():
            return
        if not self._began:
            precision = str(self.accelerator.mixed_precision)  # "no", "fp16", "bf16", "fp8"
            self.precision = "32" if precision == "no" else precision
            self.techniques = techniques_of(*self._prepared_models())
            if self.is_main:
                self._loaders_said()
            for model in self._prepared_models():
                if refused := trained_here(model, self):
                    raise ConfigurationError(refused)
        super().train_begin(steps_per_epoch)

    @override
    def report(
        self, metric: float | Callable[[], float | None], epoch: int | None = None
    ) -> ReportAnswer:
        """`TrialSession.report`; for a run that went on at a size of the loop's own
        (`_went_on`), the metric is judged here, by the job's target and ``max_epochs``."""
        shrunk = self._shrunk
        if not shrunk.outside:
            return super().report(metric, epoch)

        def value() -> float | None:
            number = metric() if callable(metric) else metric
            return None if number is None else float(number)

        measured = from_rank_zero(self._collectives.broadcast, self.is_main, value)
        if measured is None:
            return ReportAnswer(stop=False, reported=False)
        stop, outcome = shrunk.judge({"metric": measured}, self.outcome, self.is_main)
        if self.server is not None and outcome is not None:
            self.server.outcome = outcome
        self.converged = stop and shrunk.converged
        return ReportAnswer(stop, self.converged)

    def _went_on(self) -> bool:
        """At ``train_begin``: whether the run goes on at a size of the loop's own, outside the
        optimizer. Where the DataLoaders the accelerator prepared since the last
        ``train_begin`` do not take the size the loop trained at but a smaller one
        (Accelerate's ``find_executable_batch_size`` after an out-of-memory error prepares its
        loop again, at a tenth less), the trial ran out of memory (`ShrunkRun`), and the
        prepared optimizers step at the rate of the batch size the loop trains now: the
        DataLoader's times the accelerator's accumulation steps (Accelerate's example of
        automatic gradient accumulation keeps its batch so)."""
        shrunk = self._shrunk
        loaders = _prepared_loaders(self.accelerator)
        fresh = [loader for loader in loaders if loader not in self._loaders_seen]
        self._loaders_seen.update(loaders)  # a loop that does not free_memory() keeps its old
        sizes = [size for size in map(batch_size_of, fresh) if size is not None]
        trained_at = shrunk.trained_at or self.micro_batch_size
        below = (size for size in sizes if size < trained_at)  # its first: the training one
        size = trained_at if trained_at in sizes else next(below, None)
        if size is None or (shrunk.trained_at is None and size != self.micro_batch_size):
            return shrunk.outside
        before = shrunk.shrank(size)
        if before is None:
            return shrunk.outside
        steps = int(getattr(self.accelerator, "gradient_accumulation_steps", 1) or 1)
        why = (
            f"the loop's DataLoader takes {size} now, not {before}, as Accelerate's "
            "find_executable_batch_size does after an out-of-memory error"
        )
        if steps > 1:
            why += f" (with {steps} accumulated micro-batches a step: batch size {size * steps})"
        shrunk.went_on(self, shrunk.outside, before, size * steps, why)
        optimizers = getattr(self.accelerator, "_optimizers", None) or []  # prepared (private)
        self._rate.went_on(optimizers, self.batch_size, size * steps)
        return True

    def _prepared_models(self) -> list[Any]:
        """The models the accelerator prepared, unwrapped (its private list, ``_models``; none
        where a version of Accelerate keeps no such list)."""
        models = getattr(self.accelerator, "_models", None) or []
        return [self.accelerator.unwrap_model(model) for model in models]

    def _loaders_said(self) -> None:
        """Warn where every DataLoader the accelerator prepared has a fixed batch size and none
        is the run's (the micro-batch of one that accumulates): the loop would train another
        size while the server charges this one. The accelerator's list of them is private
        (``_dataloaders``); without it, or with a loader of a batch sampler (no fixed size),
        nothing is said."""
        prepared = _prepared_loaders(self.accelerator)
        sizes = [batch_size_of(loader) for loader in prepared]
        if not sizes or None in sizes or self.micro_batch_size in sizes:
            return
        logger.warning(
            "zeus-bso: no DataLoader the accelerator prepared takes this run's batch size, %d "
            "(theirs: %s): the server charges %d whatever the loop trains. Build the training "
            "DataLoader with batch_size=bso.micro_batch_size, or call bso.step_begin(batch) at "
            "each step, which refuses a first batch of another size",
            self.micro_batch_size,
            ", ".join(str(size) for size in sizes),
            self.batch_size,
        )

    @override
    def epoch_steps(self) -> int | None:
        """The optimizer steps of an epoch of the prepared DataLoader that takes the run's
        (micro-)batch size: its batches on each process over the micro-batches a step. Without
        such a loader, or with one without a length (an iterable dataset), the steps given to
        `train_begin` (`TrialSession.epoch_steps`)."""
        for loader in _prepared_loaders(self.accelerator):
            if batch_size_of(loader) == self.micro_batch_size:
                try:
                    batches = len(loader)
                except TypeError:
                    break
                return -(-batches // self.accumulation_steps)
        return super().epoch_steps()

    def _accumulate(self) -> None:
        """With ``max_micro_batch_size``: the accelerator accumulates `accumulation_steps`
        micro-batches a step (the loop wraps its step in ``accelerator.accumulate(model)``)."""
        if self._max_micro_batch_size is not None:
            self.accelerator.gradient_accumulation_steps = self.accumulation_steps

    def fit_in_memory(self, try_steps: Callable[[int], None]) -> int:
        """`TrialSession.fit_in_memory`, and the accelerator's accumulation steps after it."""
        size = super().fit_in_memory(try_steps)
        self._accumulate()
        return size


def _prepared_loaders(accelerator: Any) -> list[Any]:
    """The DataLoaders ``accelerator`` prepared: its private list (``_dataloaders``), or none
    where a version of Accelerate keeps no such list."""
    return list(getattr(accelerator, "_dataloaders", None) or [])
