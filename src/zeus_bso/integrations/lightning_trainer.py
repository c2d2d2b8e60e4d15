"""What `ZeusBSOCallback` reads of a Lightning ``Trainer`` (of either package): what the fit is
set up to do (validate, accumulate, tune the learning rate), whether its first batch has the
size the server charges, and how it ended (the Trainer's own limits against the server's stop:
`zeus_bso.integrations.lightning_limits`). Each refusal is in words that say what to change."""

from __future__ import annotations

import logging
from typing import Any

from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations.lightning_attributes import (
    follows,
    holds,
    nested,
    read_only,
    set_to,
)
from zeus_bso.integrations.lightning_limits import ended_early, validation_every
from zeus_bso.integrations.lightning_packages import is_a, package_of
from zeus_bso.integrations.loaders import at_batch_size, not_resizable
from zeus_bso.spec import StopReason
from zeus_bso.training import TrialSession

logger = logging.getLogger(__name__)

Trainer = Any
"""A Trainer of either Lightning package."""
Module = Any
"""A LightningModule of either Lightning package."""


def tunes_the_rate(trainer: Trainer) -> bool:
    """Whether the fit is ``Tuner.lr_find``'s own: its ``LearningRateFinder`` ends the fit after
    its steps (a finder among the Trainer's callbacks tunes the rate within the fit, which goes
    on: a run like any other, where no ``lr_rule`` scales its rate: `rate_finder_refused`)."""
    return any(
        is_a(callback, "LearningRateFinder") and getattr(callback, "_early_exit", False)
        for callback in trainer.callbacks
    )


def accumulation_refused(trainer: Trainer, max_micro_batch_size: int | None) -> str | None:
    """Why the Trainer's own gradient accumulation cannot train the server's batch size (None:
    it accumulates nothing of its own, or the callback sets it: ``max_micro_batch_size``)."""
    if any(is_a(callback, "GradientAccumulationScheduler") for callback in trainer.callbacks):
        what = "a GradientAccumulationScheduler (remove it)"
    elif max_micro_batch_size is None and trainer.accumulate_grad_batches != 1:
        what = f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches})"
    else:
        return None
    return (
        f"{what}: each optimizer step would take several batches of the size the server "
        "charges; to accumulate, pass ZeusBSOCallback(max_micro_batch_size=...), which sets "
        "accumulate_grad_batches so that each optimizer step takes the server's batch size"
    )


def rate_finder_refused(trainer: Trainer, lr_rule: str, reference: int) -> str | None:
    """Why a ``LearningRateFinder`` among the fit's callbacks cannot tune the rate of a fit
    that ``lr_rule`` scales (None: there is none, or the rule is ``"none"``). The finder tunes
    the rate at the run's own batch size, before its steps; the rule would then scale that rate
    again by the run's size over the reference (``reference``): at twice the reference, a
    linear rule trained at twice the rate the finder chose."""
    if lr_rule == "none" or not any(is_a(c, "LearningRateFinder") for c in trainer.callbacks):
        return None
    return (
        f"a LearningRateFinder among the Trainer's callbacks tunes the learning rate at each "
        f"run's batch size, and lr_rule={lr_rule!r} would scale the rate it chooses again, by "
        f"the run's batch size over {reference}: tune the rate once at {reference} instead "
        "(Tuner(trainer).lr_find(model) before trainer.fit runs at that size, and the rule "
        "scales its rate to each run's), or, for a job that does not set lr_rule itself, keep "
        "the finder and pass lr_rule='none' (each run trains at the rate the finder chose)"
    )


def validates(trainer: Trainer, pl_module: Module) -> bool:
    """Whether the fit runs validations (each one a report)."""
    if trainer.limit_val_batches == 0:
        return False
    return bool(package_of(trainer).is_overridden("validation_step", pl_module))


def loaders_built(trainer: Trainer, pl_module: Module) -> list[str]:
    """The DataLoaders the datamodule or the module holds already (at the callback's setup:
    built in the datamodule's ``setup()`` or ``__init__``, before the batch size was set), as
    ``Class.attribute``."""
    from torch.utils.data import DataLoader

    holders = [trainer.datamodule, pl_module]
    return [
        f"{type(holder).__name__}.{name}"
        for holder in holders
        if holder is not None
        for name, value in vars(holder).items()
        if isinstance(value, DataLoader)
    ]


_FROM_DATASETS = (
    "the datamodule's train_dataloader was given to it (LightningDataModule.from_datasets(..., "
    "batch_size=...) builds its DataLoaders at the size it was given, and the callback builds "
    "again only one plain DataLoader of it): subclass LightningDataModule with a '{}' "
    "attribute and build the DataLoaders from it in train_dataloader()"
)


def given_loaders(trainer: Trainer) -> bool:
    """Whether the datamodule's ``train_dataloader`` was assigned to it, not defined by its
    class: `LightningDataModule.from_datasets` assigns functions that close over the
    ``batch_size`` it was given."""
    return trainer.datamodule is not None and "train_dataloader" in vars(trainer.datamodule)


def no_batch_size(batch_arg_name: str, trainer: Trainer, pl_module: Module) -> str:
    """Why the callback cannot set the fit's batch size where neither the model, its hparams
    nor the datamodule has ``batch_arg_name`` (and the fit was given no DataLoader), and what
    to change: a nested config's path to it, where one holds it (`nested`)."""
    paths = nested(trainer, pl_module, batch_arg_name.rsplit(".", 1)[-1])
    hint = f" (a nested config holds it: batch_arg_name={paths[0]!r})" if paths else ""
    return (
        f"neither the model, its hparams nor the datamodule has '{batch_arg_name}'{hint}; give "
        "the LightningModule or LightningDataModule that attribute and build the DataLoader "
        "from it, or pass batch_arg_name=... naming it (a dotted path for a nested config: "
        "'data.batch_size' for self.hparams.data.batch_size)"
    )


def debug_run(trainer: Trainer) -> str | None:
    """The Trainer's debugging mode, in words, whose fit is no run of the job (a few batches,
    or the same few again and again); None: a real fit."""
    if trainer.fast_dev_run:
        return "fast_dev_run"
    if trainer.overfit_batches:
        return f"overfit_batches={trainer.overfit_batches}"
    return None


def unsettable(trainer: Trainer, pl_module: Module, batch_arg_name: str) -> str | None:
    """Why the callback cannot set ``batch_arg_name`` on the model or the datamodule: it is a
    property without a setter there, which reads nothing the callback sets (one that returns
    ``self.hparams.batch_size`` reads what is set there: `follows`). None: it can."""
    if follows(trainer, pl_module, batch_arg_name):
        return None
    for holder in (pl_module, trainer.datamodule):
        if holder is not None and read_only(holder, batch_arg_name):
            return (
                f"the callback cannot set '{batch_arg_name}', a property of "
                f"{type(holder).__name__} without a setter that reads no attribute it can "
                f"set: give it a setter, or have it return self.hparams.{batch_arg_name}, or "
                "build the DataLoader from a plain attribute, or pass batch_arg_name=... "
                "naming one"
            )
    return None


def given_to_fit(trainer: Trainer) -> Any | None:
    """The train data built at a size of the script's: what ``trainer.fit`` was given
    (``train_dataloaders=``, or its second argument), or what a datamodule of
    `LightningDataModule.from_datasets` builds (`given_loaders`: at the ``batch_size`` it was
    given). None: the model or a datamodule builds it from an attribute
    (``train_dataloader()``)."""
    if given_loaders(trainer):
        return trainer.datamodule.train_dataloader()  # a DataLoader of the datasets, built now
    source = getattr(trainer.fit_loop, "_data_source", None)
    is_module = getattr(source, "is_module", None)
    if not callable(is_module) or is_module():
        return None
    return getattr(source, "instance", None)


def loader_given_to_fit(
    trainer: Trainer, batch_arg_name: str, given: Any | None, elastic: bool = False
) -> str | None:
    """Why the fit cannot train the server's batch size (``elastic``: the elastic batch size's
    sizes): ``trainer.fit`` was given train data (``given``: `given_to_fit`'s) that cannot be
    built again at another size (`zeus_bso.integrations.loaders.not_resizable`). None: it was
    given none, or a DataLoader that can (`BatchTarget`)."""
    why = None if given is None else not_resizable(given)
    if why is None:
        return None
    if given_loaders(trainer):
        return f"{_FROM_DATASETS.format(batch_arg_name)} (its train_dataloader() built {why})"
    cannot = (
        "which ElasticBatchSizeCallback cannot build again at each epoch's size"
        if elastic
        else "which the callback cannot build again at the server's batch size"
    )
    return (
        f"trainer.fit(model, train_dataloaders=...) was given {why}, {cannot}: give it one "
        "torch DataLoader built with batch_size=..., or build the DataLoader in the model's (or "
        f"a LightningDataModule's) train_dataloader() with self.{batch_arg_name} (or "
        f"self.hparams.{batch_arg_name}), and call trainer.fit(model) or "
        "trainer.fit(model, datamodule=...)"
    )


class BatchTarget:
    """Where a fit's batch size goes. Where ``trainer.fit`` was given its train DataLoader, or
    a datamodule of ``from_datasets`` builds it (`given_to_fit`): that DataLoader, built again
    at each size the callback sets (`zeus_bso.integrations.loaders.at_batch_size`: the same
    dataset, sampler and workers), in its place as the fit's train data before Lightning reads
    it; ``batch_arg_name`` too, where the model, its hparams or the datamodule has it.
    Otherwise ``batch_arg_name``, from which ``train_dataloader()`` builds the DataLoader."""

    def __init__(self, trainer: Trainer, pl_module: Module, batch_arg_name: str) -> None:
        self.trainer, self.module, self.name = trainer, pl_module, batch_arg_name
        self.given = given_to_fit(trainer)
        """The train data as the script built it (given to the fit, or by ``from_datasets``);
        None: none."""
        self.sets_attribute = self.given is None or (
            holds(trainer, pl_module, batch_arg_name)
            and unsettable(trainer, pl_module, batch_arg_name) is None
        )
        """Whether `set` sets ``batch_arg_name`` too (a given DataLoader needs none)."""
        self.size = 0
        """The size set last (0: none yet)."""

    def set(self, size: int) -> None:
        """Train at ``size`` samples a step (on each process)."""
        self.size = size
        if self.given is not None:
            self.trainer.fit_loop._data_source.instance = at_batch_size(self.given, size)
        if self.sets_attribute:
            set_to(self.trainer, self.module, self.name, size)

    def loader(self) -> Any:
        """A train DataLoader of its own at the size set last, for steps that are undone: one
        that the fit will not iterate (whose persistent workers, and the random seeds they
        drew, the fit does not inherit)."""
        if self.given is not None:
            return at_batch_size(self.given, self.size)
        trainer = self.trainer
        holder = trainer.datamodule if trainer.datamodule is not None else self.module
        return holder.train_dataloader()


def fit_refused(
    trainer: Trainer,
    pl_module: Module,
    batch_arg_name: str,
    max_micro_batch_size: int | None,
    given: Any | None,
) -> str | None:
    """Why no batch size the callback sets could train the fit (at its setup, before the server
    is asked): the fit was given train data it cannot build again (``given``: `given_to_fit`'s),
    nothing holds ``batch_arg_name``, another callback chooses the size (Lightning's batch size
    finder, or the elastic batch size's), or the Trainer accumulates of its own. None: it
    can."""
    refused = loader_given_to_fit(trainer, batch_arg_name, given)
    if refused and not debug_run(trainer):
        return refused
    if given is None and not holds(trainer, pl_module, batch_arg_name):
        return no_batch_size(batch_arg_name, trainer, pl_module)
    if any(is_a(callback, "BatchSizeFinder") for callback in trainer.callbacks):
        return (
            "Lightning's BatchSizeFinder (or Tuner.scale_batch_size) chooses the batch size "
            "too: remove it from the Trainer's callbacks; ZeusBSOCallback sets the size the "
            "server chooses, and tries a size new to these GPUs in memory first "
            "(memory_check_steps)"
        )
    if any(is_a(callback, "ElasticBatchSizeCallback") for callback in trainer.callbacks):
        return (
            "zeus_bso.elastic.ElasticBatchSizeCallback chooses the batch size too, anew each "
            "epoch: the server would judge and charge a size that trained only part of the run. "
            "Use one of them: ZeusBSOCallback learns one batch size across the job's "
            "recurrences; ElasticBatchSizeCallback grows it within a run"
        )
    return accumulation_refused(trainer, max_micro_batch_size)


def trial_refused(
    trainer: Trainer, pl_module: Module, batch_arg_name: str, monitor: str, given: Any | None
) -> str | None:
    """Why a fit that is a run of the job (no debugging mode, not ``Tuner.lr_find``'s) cannot
    be a trial: the size cannot be set (``given``: the DataLoader the fit was given, which
    needs no attribute), or no validation would judge it (none runs, or ``barebones`` drops
    what it logs). None: it can."""
    refused = unsettable(trainer, pl_module, batch_arg_name)
    if refused and given is None:
        return refused
    if not validates(trainer, pl_module):
        return (
            "this fit never validates (limit_val_batches=0, or the module has no "
            f"validation_step), so the server could not judge its batch size: validate, logging "
            f"'{monitor}', or fit without ZeusBSOCallback"
        )
    if getattr(trainer, "barebones", False):  # Lightning 2.1 and later
        return (
            "Trainer(barebones=True) turns self.log off, so the metric the callback reports "
            f"('{monitor}') never reaches it, and the server could not judge the batch size: "
            "fit without barebones=True, or without ZeusBSOCallback"
        )
    every, limit = validation_every(trainer), trainer.max_epochs
    if limit is not None and 0 <= limit < every:
        return (
            f"this fit never validates: Trainer(check_val_every_n_epoch={every}) is above its "
            f"max_epochs ({limit}), so the server could not judge its batch size: validate "
            "every epoch (check_val_every_n_epoch=1), or every few epochs, fewer than max_epochs"
        )
    return None


def no_trial(trainer: Trainer, target: BatchTarget, lr_find_size: int | None) -> bool:
    """Whether the fit is no run of the job, and says so on rank 0: ``Tuner.lr_find``'s fit,
    which ends after the finder's steps, at ``lr_find_size`` (the batch size ``lr_rule`` scales
    the rate from; None: the module's own), or a debugging mode (``fast_dev_run``...)."""
    if tunes_the_rate(trainer):
        where = "the module's batch size"
        if lr_find_size is not None:
            target.set(lr_find_size)
            where = f"batch size {lr_find_size}, the one lr_rule scales its rate from"
        level, said = (
            logging.INFO,
            (
                f"Tuner.lr_find's fit runs without the batch size optimizer, at {where}; the fit "
                "after it gets the server's"
            ),
        )
    elif debugging := debug_run(trainer):
        level, said = (
            logging.WARNING,
            (
                f"{debugging}: this fit runs without the batch size optimizer (nothing is asked of "
                "the server or reported to it)"
            ),
        )
    else:
        return False
    if trainer.is_global_zero:
        logger.log(level, "zeus-bso: %s", said)
    return True


def warn_of_unlogged(trainer: Trainer, monitor: str) -> None:
    """At the sanity check's end: its validation logs what every validation will, so a monitor
    it did not log, beside metrics it did, would fail the fit's first report."""
    logged = sorted(trainer.callback_metrics)
    if logged and monitor not in logged and trainer.is_global_zero:
        logger.warning(
            "zeus-bso: the sanity check's validation logged %s but not '%s', the metric the "
            "callback reports (monitor=...): the fit's first report will fail unless its "
            "validation logs it",
            logged,
            monitor,
        )


def note_of_rate_monitor(trainer: Trainer, factor: float | None, batch_size: int) -> None:
    """A ``LearningRateMonitor`` logs the schedule's rates, not those the steps take at the
    fit's batch size (``lr_rule``'s ``factor``): it says so."""
    monitors = any(is_a(callback, "LearningRateMonitor") for callback in trainer.callbacks)
    if monitors and factor is not None and factor != 1.0 and trainer.is_global_zero:
        logger.info(
            "zeus-bso: LearningRateMonitor logs the schedule's rates; the steps take %.4g times "
            "them at batch size %d (lr_rule), logged as bso/lr at each validation",
            factor,
            batch_size,
        )


def early_stopping(trainer: Trainer) -> str | None:
    """Which EarlyStopping callback ended the fit, in words (its metric stopped improving, or
    passed one of its thresholds, before the job's target), or None. Such a run did not
    converge at its batch size, and counts so, as a run that trained the job's ``max_epochs``
    in vain (`zeus_bso.training.TrialSession.stopped_itself`): released, the job would run the
    same size again at every recurrence, learning nothing."""
    for callback in trainer.early_stopping_callbacks:
        reason = getattr(callback, "stopping_reason", None)  # Lightning 2.6 and later
        stopped = callback.stopped_epoch > 0 if reason is None else reason.name != "NOT_STOPPED"
        if stopped:
            return f"EarlyStopping(monitor={callback.monitor!r}) ended the fit"
    return None


def no_validation_batches(trainer: Trainer, monitor: str) -> str | None:
    """Why the fit cannot be judged, known when training starts: its validation DataLoaders,
    built for the first epoch's validation, hold no batch (an empty validation set), so it
    never validates and each run ended unjudged. None: they hold some, or are not built yet
    (a fit that validates from a later epoch on)."""
    if trainer.val_dataloaders is None:
        return None
    batches = trainer.num_val_batches
    if not isinstance(batches, list) or sum(batches) > 0:  # inf: a loader without a length
        return None
    return (
        "this fit never validates: its validation DataLoader has no batches (an empty "
        "validation set), so the server could not judge its batch size: give it validation "
        f"data, on which the module logs '{monitor}'"
    )


def trained_before(trainer: Trainer) -> str | None:
    """Why a fit whose callback holds a new trial cannot train: it starts at a step above 0 (it
    resumed a checkpoint that holds no trial of this job, or the Trainer fitted before), so the
    trial would count training done before it as its own. None: it starts from scratch."""
    if trainer.global_step == 0:
        return None
    return (
        f"the fit starts at step {trainer.global_step} (epoch {trainer.current_epoch}): it "
        "resumed a checkpoint that holds no trial of this job (saved without ZeusBSOCallback, "
        "or by another job), or this Trainer fitted before, so this run's trial would count "
        "training done before it as its own; for a new run, fit a new Trainer from scratch, "
        "or load the weights without resuming (Model.load_from_checkpoint(path), and fit "
        "without ckpt_path)"
    )


class Monitored:
    """The monitored metric of a fit's validations, as rank 0 reads it for a report."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reported: object = None  # the value last reported

    def reset(self) -> None:
        """A new fit: nothing reported yet."""
        self._reported = None

    def read(self, trainer: Trainer, when: str) -> float | None:
        """The metric's value at this validation (``when``: its epoch or step, in words); None
        where the validation did not log it.

        Raises:
            ConfigurationError: it was never logged; the message names what was.
        """
        metrics = trainer.callback_metrics
        if self.name not in metrics:
            raise ConfigurationError(
                f"metric '{self.name}' was not logged; logged are {sorted(metrics)} (log it in "
                "validation_step or on_validation_epoch_end, or pass monitor=...)"
            )
        value = metrics[self.name]
        # Lightning keeps a metric's last value until it is logged again, and a value logged
        # anew is a new tensor: the one reported last time is a stale value.
        if value is self._reported:
            logger.warning(
                "zeus-bso: '%s' was not logged at this validation (%s): nothing is reported for "
                "it (its value is an earlier validation's)",
                self.name,
                when,
            )
            return None
        self._reported = value
        return float(value)


def end_fit(session: TrialSession, trainer: Trainer, job_max_epochs: int) -> None:
    """End the fit's run as it ended: at the server's stop; stopped by an EarlyStopping below
    the target (not converged at its batch size: counted); or by the Trainer's own limits, or
    another callback, first (released)."""
    if session.stopped:
        session.end()
    elif (stopper := early_stopping(trainer)) is not None:
        session.stopped_itself(stopper)
    else:
        session.release(ended_early(trainer, job_max_epochs), StopReason.ENDED_EARLY)


def rebuild_for_the_batch_size(trainer: Trainer) -> None:
    """The batch size changed after the strategy's setup (the memory check moved it, or a
    strategy that restores checkpoints late resumed another trial): a train DataLoader built
    at the old size is built again, and so are the optimizers and schedules, where
    ``configure_optimizers`` has run: it may have sized a schedule from the data
    (``estimated_stepping_batches``, which built the fit's DataLoader, or
    ``len(self.train_dataloader())``, which did not). As Lightning's batch size finder resets
    them."""
    loop = trainer.fit_loop
    if getattr(loop, "_combined_loader", None) is not None:
        loop._combined_loader = None  # built again, at the new size, when the fit reads it
    if trainer.optimizers:
        trainer.strategy.setup_optimizers(trainer)
