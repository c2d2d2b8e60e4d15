"""``ZeusBSOCallback`` for PyTorch Lightning 2.x: ``Trainer(callbacks=[ZeusBSOCallback(...)])``,
with ``import lightning.pytorch`` or the classic ``import pytorch_lightning``, either package or
both installed (the callback is a Callback of each; it uses the helpers of its Trainer's).

When a fit is set up (the ``setup`` hook, before ``configure_optimizers`` and before any DataLoader
is built) rank 0 asks the server for the batch size, broadcasts it, and sets it on the model, its
hparams or the datamodule (``batch_arg_name``), or builds the train DataLoader given to
``trainer.fit`` again at it (`zeus_bso.integrations.lightning_trainer.BatchTarget`), so that a
schedule sized from the data (``trainer.estimated_stepping_batches``) is sized for it; the fit's
first training batch is checked against it. After every validation of the fit (sanity checks and
``trainer.validate`` excepted) rank 0 reports cumulative time, the energy of the run (every rank's
GPUs, each GPU once) and the monitored metric, and every rank stops when the server says so. A fit
that validates every few epochs (``check_val_every_n_epoch``) reports its epoch count; one that
validates within epochs (``val_check_interval`` below 1) reports each validation as an epoch, and
says so when training starts. The server's figures of each report (``bso/cost``, ``bso/energy_j``,
``bso/batch_size``) are logged once: at the epoch's end, or at the validation's step for a
validation within an epoch. An error on rank 0 (a metric that was not logged) is raised on every
rank. A fit resumed from a checkpoint continues the same trial. The learning rate follows the batch
size by ``lr_rule`` at every step of whatever schedule ``configure_optimizers`` builds. At the fit's
end a line through Lightning's console (``rank_zero_info``) says how the run went (`outcome`). A fit
that fails before its first optimizer step (out of memory excepted), or with a `ConfigurationError`,
and one that the Trainer's own limits end before the server's stop, release their trial: nothing is
counted against the batch size. ``Tuner.lr_find``'s own fit asks nothing of the server.

The trial on every rank (the server, the shared answers, each GPU's energy once, checkpoints)
is `zeus_bso.training.session.TrialSession`'s; this module maps Lightning's hooks onto it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, NoReturn

from typing_extensions import Unpack, override

from zeus_bso.energy import device_meter
from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations import lightning_cadence as cadence
from zeus_bso.integrations import lightning_limits as limits
from zeus_bso.integrations import lightning_trainer as fit
from zeus_bso.integrations.handoff import OutcomeHandoff
from zeus_bso.integrations.lightning_batch_check import batch_refused
from zeus_bso.integrations.lightning_memory import LoaderRefusedError, checks_memory, try_size
from zeus_bso.integrations.lightning_packages import CALLBACKS, package_of
from zeus_bso.integrations.lightning_schedules import schedule_refused
from zeus_bso.integrations.lightning_trainer import Module, Trainer
from zeus_bso.integrations.loaders import no_batches
from zeus_bso.options import (
    JobLike,
    check_memory_check_steps,
    check_name,
    job_lr_rule,
    lightning_settings,
)
from zeus_bso.training import RunOutcome, TrialSession, trained_models
from zeus_bso.training.session_options import RunOptions, SessionOptions, callback_arguments
from zeus_bso.training.techniques import techniques_of

logger = logging.getLogger(__name__)


class ZeusBSOCallback(*CALLBACKS):  # type: ignore[misc]
    """Chooses the batch size of a Lightning fit and stops it when the optimizer says so.

    Args:
        server_url: the zeus-bso server (default: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (its ``job_id`` may be
            left out: see `BatchSizeOptimizer`).
        monitor: the logged validation metric to report (``trainer.callback_metrics`` key).
        batch_arg_name: the attribute that holds the batch size (model, hparams or datamodule),
            or a dotted path under them (``"data.batch_size"``: ``self.hparams.data.batch_size``
            of a module built from a nested config); a fit given its train DataLoader
            (``trainer.fit(model, train_loader)``) needs none: the DataLoader is built again at
            the server's size.
        memory_check_steps: at a batch size that never ran on these GPUs, this many training
            steps are tried when the fit starts, and undone (the weights, the optimizers' state
            and the random state are restored); one that runs out of memory is marked
            ``infeasible`` and the fit goes on at the server's next batch size (0: none tried;
            a fit that runs out of memory later ends, its trial marked ``infeasible``).
        options: `zeus_bso.training.RunOptions`, passed on to each fit's session
            (``energy_meter``: a meter per fit where None, of the GPU each rank trains on:
            `zeus_bso.energy.device_meter`). ``raise_if_unconverged``: the fit
            raises `ZeusBSOTrainFailError` at its end when the run did not reach its target.
            With ``lr_rule``, the optimizers and schedulers that ``configure_optimizers``
            builds at the rate tuned at ``reference_batch_size`` are scaled when training
            starts (once: a resumed fit keeps its checkpoint's rates), and ``bso/lr`` is
            logged. With ``max_micro_batch_size``, a batch size above it trains as
            micro-batches of at most that many samples (``batch_arg_name``) with the Trainer's
            ``accumulate_grad_batches`` set so that each optimizer step takes the server's
            batch size (a Trainer that accumulates of its own, ``accumulate_grad_batches``
            above 1 or a ``GradientAccumulationScheduler``, is refused).
    """

    def __init__(
        self,
        server_url: str | None = None,
        job: JobLike | None = None,
        monitor: str = "val_acc",
        batch_arg_name: str = "batch_size",
        *,
        memory_check_steps: int = 3,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__()
        self.memory_check_steps = check_memory_check_steps(memory_check_steps)
        self.monitor = check_name(monitor, "monitor", "a logged validation metric", "val_acc")
        self.batch_arg_name = check_name(
            batch_arg_name, "batch_arg_name", "the attribute holding the batch size", "batch_size"
        )
        self.server_url, self.job, checked = callback_arguments(
            server_url, job, monitor, options, ZeusBSOCallback.__init__
        )  # no network: a clear error now
        self.options = checked
        """What each fit's `zeus_bso.training.TrialSession` is given (a fit gets a meter of its
        own where ``energy_meter`` is None)."""
        self._meter = options.get("energy_meter")
        self.session: TrialSession | None = None
        """This fit's trial on this rank (`zeus_bso.training.TrialSession`), from its start."""
        self.batch_size: int | None = None
        """This fit's batch size, from its start."""
        self.trial_number: int | None = None
        self.job_id: str | None = None
        """The job this fit is a recurrence of, from its start."""
        self._outcome: RunOutcome | None = None
        self._handoff = OutcomeHandoff()
        self._restored: dict[str, Any] | None = None
        self._resumed = False
        self._first_batch_checked = False
        self._validated = False  # the fit's first validation came (its DataLoaders are built)
        self._built_early: list[str] = []
        self._trainer: Trainer | None = None
        self._module: Module | None = None
        self._target: fit.BatchTarget | None = None
        self._length = cadence.FitLength()  # the fit's max_steps (each fit's own, from setup)
        self._epoch = cadence.EpochLength()  # the fit's limit_train_batches (each fit's own)
        self._validation = cadence.ValidationLength()  # and its limit_val_batches
        self._warmup = cadence.WarmupSteps()  # hparams' warm-up steps (each module's own)
        self._checkpoints = cadence.CheckpointSteps()  # ModelCheckpoint's every_n_train_steps
        self._unlogged: dict[str, float] = {}
        self._monitored = fit.Monitored(monitor)  # the values reported (rank 0)

    @property
    @override
    def state_key(self) -> str:
        return f"ZeusBSOCallback[{self.job.job_id_prefix}]"

    def _fitting(self, trainer: Trainer) -> bool:
        return bool(trainer.state.fn == package_of(trainer).fitting)

    # -- choose and set the batch size before anything reads the data --------------------------

    @override
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        # Here, before configure_optimizers and before any DataLoader is built: a schedule sized
        # there (trainer.estimated_stepping_batches, len(self.train_dataloader())) sees the
        # server's batch size. A fit resumed from a checkpoint gets its trial back when the
        # checkpoint's callback state is loaded (load_state_dict), which on most strategies is
        # still before configure_optimizers.
        if stage != "fit":
            return
        self._monitored.reset()
        self._first_batch_checked = self._validated = False
        self._trainer, self._module, name = trainer, pl_module, self.batch_arg_name
        micro = self.options.get("max_micro_batch_size")
        target = fit.BatchTarget(trainer, pl_module, name)  # sets nothing yet
        if refused := fit.fit_refused(trainer, pl_module, name, micro, target.given):
            raise ConfigurationError(refused)  # before the server is asked
        self._built_early = fit.loaders_built(trainer, pl_module)  # before the size is set
        self._target = target
        self._length, self._epoch = cadence.FitLength(), cadence.EpochLength()
        self._validation = cadence.ValidationLength()
        self.session = None
        rule = job_lr_rule(self.job, self.options.get("lr_rule", "none"))
        size = self.options.get("reference_batch_size") or self.job.default_batch_size
        if fit.no_trial(trainer, target, size if rule != "none" else None):
            return  # Tuner.lr_find's fit, or a debugging mode's: its epochs are not the job's
        if refused := fit.rate_finder_refused(trainer, rule, size):
            raise ConfigurationError(refused)  # before the server is asked
        if self.options.get("energy_meter") is None:  # a closed meter measures no next fit
            self._meter = device_meter(trainer.strategy.root_device)  # this rank's GPU
        if refused := fit.trial_refused(trainer, pl_module, name, self.monitor, target.given):
            raise ConfigurationError(refused)  # before the server is asked
        self._start_session(trainer, pl_module, self._restored)

    def _start_session(
        self, trainer: Trainer, pl_module: Module, resume: dict[str, Any] | None
    ) -> None:
        """This fit's trial on every rank (a new one, or ``resume``'s), its batch size set."""
        self.session = TrialSession(
            trainer.is_global_zero,
            lambda values, step: None,  # logged at the epoch's end (on_train_epoch_end)
            self.server_url,
            self.job,
            broadcast=lambda value: trainer.strategy.broadcast(value, src=0),
            show=package_of(trainer).info,
            **(self.options | SessionOptions(resume=resume, energy_meter=self._meter)),
            handle_sigterm=False,  # Lightning's own handler raises SIGTERMException
            sigterm_exceptions=package_of(trainer).sigterm,
            raise_from_report=False,  # at the fit's end (teardown), after its checkpoints
            by_framework=True,  # scales the fit's optimizers, accumulates as it set
        )
        self._resumed = resume is not None
        self._set_batch(trainer, pl_module)
        self.batch_size, self.trial_number = self.session.batch_size, self.session.trial_number
        self.job_id = self.session.job_id

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        # The optimizers exist from here: the memory check tries steps with them.
        if self.session is None or self._target is None:
            return
        steps = 0 if self._resumed else self.memory_check_steps
        if checks_memory(self.session, trainer, pl_module, steps):
            before = self.session.micro_batch_size
            tried = functools.partial(
                try_size,
                trainer,
                pl_module,
                self.session,
                self._target,
                steps=steps,
                accumulates=self.options.get("max_micro_batch_size") is not None,
                built=self._built_early,
                seen=[],
            )
            try:
                self.session.fit_in_memory(tried)
            except LoaderRefusedError as refused:  # the size was not what the steps tried
                self._refuse(trainer, str(refused))
            self._set_batch(trainer, pl_module)
            if self.session.micro_batch_size != before:
                fit.rebuild_for_the_batch_size(trainer)
            self.batch_size, self.trial_number = self.session.batch_size, self.session.trial_number
        if (said := self._validation.keep(trainer, self.session, self._target)) and (
            trainer.is_global_zero
        ):  # the size is final: the validation's batches hold the reference's samples
            logger.info("zeus-bso: %s", said)
        logger.info("batch size %d (trial %s)", self.batch_size, self.trial_number)

    def _written_for(self) -> int:
        """The batch size the fit's schedules were written for: that of the train DataLoader
        the script gave ``trainer.fit`` (one that `BatchTarget` builds again has one), else
        the job's reference (the size its rate was tuned at: ``reference_batch_size``, or the
        default)."""
        if self._target is not None and self._target.given is not None:
            return int(self._target.given.batch_size)
        return self.options.get("reference_batch_size") or self.job.default_batch_size

    def _set_batch(self, trainer: Trainer, pl_module: Module) -> None:
        """Give the module the session's batch: its micro-batches, accumulated to the batch
        size when the fit accumulates."""
        session, target = self.session, self._target
        assert session is not None
        assert target is not None
        target.set(session.micro_batch_size)
        if self.options.get("max_micro_batch_size") is not None:
            trainer.accumulate_grad_batches = session.accumulation_steps
        for said in (
            self._length.keep(trainer, session),
            self._epoch.keep(trainer, session),
            self._warmup.keep(trainer, pl_module, session),
            *self._checkpoints.keep(trainer, session),
        ):
            if said and trainer.is_global_zero:
                logger.info("zeus-bso: %s", said)  # max_steps, epochs, warm-up: in samples

    # -- training -----------------------------------------------------------------------------

    def _scale_learning_rates(self, trainer: Trainer) -> None:
        """Every optimizer's steps take its schedule's rates at the fit's batch size (the
        schedule is left as it is; a resumed fit keeps its checkpoint's factor)."""
        assert self.session is not None
        for optimizer in trainer.optimizers:
            self.session.scale(optimizer)
        fit.note_of_rate_monitor(trainer, self.session.lr_factor, self.session.batch_size)

    @override
    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.session is not None:
            fit.warn_of_unlogged(trainer, self.monitor)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self.session is None:
            return
        self.session.precision = str(trainer.precision)  # e.g. "bf16-mixed", for the reports
        self.session.techniques = techniques_of(pl_module)
        if not self._resumed and (refused := fit.trained_before(trainer)):
            self._refuse(trainer, refused)
        if not self._resumed and (refused := trained_models.trained_here(pl_module, self.session)):
            self._refuse(trainer, refused)
        if refused := fit.no_validation_batches(trainer, self.monitor):
            self._refuse(trainer, refused)
        if refused := schedule_refused(
            trainer, self._written_for(), self.session.batch_size, self.job.max_epochs
        ):
            self._refuse(trainer, refused)
        if trainer.is_global_zero:  # the fit's batches an epoch are counted from here
            every = cadence.batches_apart(trainer, self.session)
            given = self._length.given  # the script's max_steps, of the reference's steps
            part = self._epoch.given  # and its limit_train_batches
            for warning in limits.limit_warnings(trainer, self.job.max_epochs, every, given, part):
                logger.warning("%s", warning)
        if (kept := cadence.keep_samples(trainer, self.session)) and trainer.is_global_zero:
            logger.info("zeus-bso: %s", kept)
        if limits.warn_of_interval(trainer, self.job.max_epochs):
            self.session.reports_within_epochs_said()
        if self.session.lr.rule != "none":  # the callback's rule, or the job's
            self._scale_learning_rates(trainer)
        batches = trainer.num_training_batches
        steps = int(batches) if batches not in (None, float("inf")) else None
        self.session.train_begin(steps)  # on every rank at once; rank 0's heartbeat

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self.session is not None:  # after DataLoaders built again, which set the interval
            cadence.keep_samples(trainer, self.session)

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int
    ) -> None:
        if self.session is not None and self._fitting(trainer):
            if not self._first_batch_checked:
                self._first_batch_checked = True
                told = self.session.micro_batch_size
                target, built = self._target, self._built_early
                assert target is not None  # set with the session
                if refused := batch_refused(trainer, batch, told, target, built):
                    self._refuse(trainer, refused)  # the fit ends
            self.session.step_begin()

    @override
    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.session is not None and self._fitting(trainer):
            self.session.step_end()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        session = self.session
        if trainer.sanity_checking or not self._fitting(trainer) or session is None:
            return

        epoch = trainer.current_epoch + 1 if limits.validates_at_epoch_ends(trainer) else None

        if not (self._validated or self._validation.settled) and trainer.is_global_zero:
            micro, reference = session.micro_batch_size, session.lr.reference
            if said := limits.validation_part_warning(trainer, micro, reference):
                logger.warning("%s", said)
        self._validated = True
        when = f"epoch {epoch}" if epoch is not None else f"step {trainer.global_step}"
        # Read on rank 0; its error reaches every rank.
        metric = functools.partial(self._monitored.read, trainer, when)
        before = session.last
        stop = session.report(metric, epoch=epoch)
        if session.last is not before:  # reported (on every rank)
            if epoch is not None:  # at an epoch's end: logged there (on_train_epoch_end)
                self._unlogged = dict(session.last)
            elif trainer.is_global_zero:
                # Within an epoch (a fit of one endless epoch, on a dataset without a length,
                # has no other end): straight to the loggers, at this step.
                for logger_ in trainer.loggers:
                    logger_.log_metrics(dict(session.last), step=trainer.global_step)
        trainer.should_stop = trainer.should_stop or stop.stop

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        # self.log is not allowed in on_validation_end; a report at an epoch's end is logged
        # here, once (an epoch without a validation logs nothing). The values are the same on every
        # rank (the report's shared answer): with rank_zero_only, Lightning reduces nothing
        # whatever sync_dist says, and sync_dist=True keeps its advice to sync (a warning a
        # value, on every rank of a distributed fit) off. One value an epoch, whatever the batch:
        # batch_size=1 spares Lightning reading a size from the last batch (which a step that
        # takes the dataloader_iter does not get, and a combined batch may not tell).
        for name, value in self._unlogged.items():
            pl_module.log(name, value, rank_zero_only=True, sync_dist=True, batch_size=1)
        self._unlogged = {}

    # -- the end of a fit ---------------------------------------------------------------------

    def _refuse(self, trainer: Trainer, message: str) -> NoReturn:
        """End the fit's trial as a refusal (released: nothing is counted against the batch
        size) and raise ``message`` as a `ConfigurationError`. Ended here, before the error
        leaves the hook: in processes that a launcher started itself (``ddp_spawn``,
        ``ddp_notebook``), Lightning calls no ``on_exception``, and the trial was failed at
        the process's exit, or left to its lease."""
        error = ConfigurationError(message)
        self._failed(trainer, error, trained=False)
        raise error

    def _failed(
        self, trainer: Trainer, error: BaseException, *, trained: bool, in_evaluation: bool = False
    ) -> None:
        """End the fit's trial after ``error``, as the session judges it (out of memory:
        infeasible on these GPUs, unless ``in_evaluation``, the validation's; not the batch
        size's fault: released; else failed, or, with a run key, left open for the restart),
        and forget the fit (Lightning calls no teardown after an exception)."""
        session, self.session = self.session, None
        if session is not None:
            session.failed(error, trained=trained, in_evaluation=in_evaluation)
            self._ended(trainer, session.outcome)
            if trainer.lightning_module is not None:  # a later run may not train it as it is
                trained_models.remember(trainer.lightning_module, session)
        self._restored = None
        self._trainer = self._module = self._target = None

    @override
    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if stage != "fit":
            return
        # Lightning skips a fit whose train DataLoaders hold no batch, before any hook of
        # training: the size cannot train on this data (and would be dispatched again).
        session = self.session
        if (
            session is not None
            and trainer.global_step == 0
            and (refused := no_batches(trainer.train_dataloader, session.micro_batch_size))
        ):
            self._refuse(trainer, refused)
        self.session = None
        self._restored = None  # a later fit with this callback starts a new trial
        self._trainer = self._module = self._target = None
        if session is None:
            return
        try:
            fit.end_fit(session, trainer, self.job.max_epochs)
        finally:
            self._ended(trainer, session.outcome)
        trained_models.remember(pl_module, session)  # a later run may not train it as it is

    @property
    def outcome(self) -> RunOutcome | None:
        """How the last fit ended (rank 0, after it). Where the strategy trained in processes
        it started (``ddp_spawn``, ``ddp_notebook``), also in the process that called ``fit``:
        the main rank hands it back (`zeus_bso.integrations.handoff`)."""
        received = self._handoff.receive()
        if received is not None:
            self._outcome = received
        return self._outcome

    def _ended(self, trainer: Trainer, outcome: RunOutcome | None) -> None:
        self._outcome = outcome
        if outcome is not None and trainer.is_global_zero:
            self._handoff.send(outcome)

    @override
    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        if self._fitting(trainer) and self.session is not None:
            self._failed(
                trainer,
                exception,
                trained=trainer.global_step > 0,
                in_evaluation=trainer.sanity_checking or trainer.validating,
            )

    # -- checkpoints: a resumed fit continues the same trial ------------------------------------

    @override
    def state_dict(self) -> dict[str, Any]:
        return self.session.checkpoint() if self.session is not None else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        restored = dict(state_dict) if state_dict.get("trial") else None
        session, trainer = self.session, self._trainer
        if restored is None or session is None or trainer is None or self._resumed:
            self._restored = restored
            return
        # The fit resumes a checkpoint of a trial: setup asked for a new one, which is withdrawn
        # (released, counting nothing; or, with a run key, the same trial, left open), and the
        # checkpoint's continues. Most strategies load it before
        # configure_optimizers and the DataLoaders; those that load it later rebuild them.
        before = session.micro_batch_size
        number = restored["trial"].get("trial_number")
        session.withdraw(f"the fit resumed trial {number} from a checkpoint")
        self.session = None  # until the checkpoint's starts (a trial that ended is refused)
        if self.options.get("energy_meter") is None:
            self._meter = device_meter(trainer.strategy.root_device)
        self._start_session(trainer, self._module, restored)
        assert self.session is not None
        if self.session.micro_batch_size != before:
            fit.rebuild_for_the_batch_size(trainer)


def callbacks_from_environment() -> list[Any]:
    """The callback every Trainer gets in this environment (`zeus_bso.options.lightning_settings`:
    none where ``ZEUS_BSO_LIGHTNING_JOB`` is unset). Lightning's entry point is
    `zeus_bso.integrations.lightning_environment.callbacks_from_environment`, which imports this
    module only where the variable is set; an install's metadata from before names this one."""
    settings = lightning_settings()
    return [] if settings is None else [ZeusBSOCallback(**vars(settings))]
