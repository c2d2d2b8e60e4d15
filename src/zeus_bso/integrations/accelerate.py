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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import Unpack, override

from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations.loaders import batch_size_of
from zeus_bso.integrations.loop_checkpoints import check_restore
from zeus_bso.lazy import require
from zeus_bso.options import JobLike
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
        self._own_accumulation = steps  # given back at the end: a later run starts from it
        self._hooks: list[Any] = []  # a session that ends as it starts has none to remove
        main = bool(accelerator.is_main_process)
        super().__init__(main, accelerator.log, server_url, job, show=accelerator.print, **options)
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
        them takes the run's batch size, the main process says so (`_loaders_said`)."""
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
