"""Lightning's validations every so many batches, the same samples apart at every batch size.

Where a fit validates within epochs (``val_check_interval`` below 1, or a number of batches),
each validation is one of the job's epochs. A fraction of an epoch is the same samples at every
batch size; a number of batches is not: ``val_check_interval=100``, tuned at the reference batch
size 16, validates every 1,600 samples there and every 6,400 at 64, so a run at 64 would be
judged on four times the samples an epoch and its data would end after a quarter of the
validations. So a fit validates every ``val_check_interval`` x reference / micro-batch size of
its batches, rounded down, at least as often (`keep_samples`). The validations the Trainer's
``max_epochs`` allows are counted by `zeus_bso.integrations.lightning_limits.validations`. A
fit bounded by the Trainer's ``max_steps`` keeps its samples too (`FitLength`), and so do an
epoch of ``limit_train_batches`` batches (a number: `EpochLength`), a validation of
``limit_val_batches`` batches of DataLoaders that take the training batch size
(`ValidationLength`), checkpoints every so many steps (`CheckpointSteps`) and a warm-up of a
fixed number of steps in the module's or datamodule's hparams (`WarmupSteps`).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any, TypeGuard

from zeus_bso.integrations.lightning_packages import package_of
from zeus_bso.integrations.loaders import batch_size_of
from zeus_bso.scaling.lr import length_steps
from zeus_bso.training import TrialSession

Trainer = Any
"""A Trainer of either Lightning package."""

logger = logging.getLogger(__name__)


def own_batches(batches: int, session: TrialSession) -> int:
    """The fit's batches (of its micro-batch size) that hold the samples of ``batches`` at the
    reference batch size, rounded down, at least one."""
    return max(1, batches * session.lr.reference // session.micro_batch_size)


def batches_apart(trainer: Trainer, session: TrialSession) -> int | None:
    """The batches between the fit's validations where it validates every
    ``val_check_interval`` batches (a number, tuned at the reference batch size): as many as
    hold its samples at the run's micro-batch size, rounded down (at least the reference's
    validations). None: it validates otherwise."""
    every = trainer.val_check_interval
    if not isinstance(every, int) or every < 1:
        return None
    return own_batches(every, session)


def keep_samples(trainer: Trainer, session: TrialSession) -> str | None:
    """Have a fit that validates every ``val_check_interval`` batches (a number) validate every
    `batches_apart` batches (``trainer.val_check_batch``, which its loop reads; again at each
    epoch's start, where the DataLoaders are built again); what it now does, in words (None:
    nothing to change)."""
    every, batches = trainer.val_check_interval, batches_apart(trainer, session)
    if batches is None or not isinstance(trainer.val_check_batch, int) or batches == every:
        return None
    trainer.val_check_batch = batches
    return (
        f"val_check_interval={every} (the batches between validations at the reference batch "
        f"size {session.lr.reference}): at batches of {session.micro_batch_size} the fit "
        f"validates every {batches} batch{'es' if batches != 1 else ''}, the same samples "
        "apart, so that each of the job's epochs (a validation) is the same data at every "
        "batch size"
    )


class FitLength:
    """A fit bounded by the Trainer's ``max_steps``: its steps are taken as tuned at the
    reference batch size, as ``val_check_interval``'s batches are, and a fit at another size
    trains at most ``max_steps`` x reference / batch size of its own, rounded up: the same
    samples, and at least as many validations. Set as the fit's batch size is (`keep`), before
    ``configure_optimizers``, so that a schedule sized from ``estimated_stepping_batches``
    spans the fit's steps. Without it, a fit at a smaller size ended after fewer validations
    than the job's ``max_epochs``, unjudged (released, so the job got it again and again), and
    one at a larger size was stopped partway through its schedule."""

    def __init__(self) -> None:
        self.given: int | None = None
        """The Trainer's own ``max_steps`` (after `keep`; None: it has none)."""
        self._read = False

    def keep(self, trainer: Trainer, session: TrialSession) -> str | None:
        """Set the fit's ``max_steps`` for the session's batch size (again where the size
        changes); what it now is, in words (None: nothing changed)."""
        if not self._read:
            steps = trainer.max_steps
            self.given, self._read = (steps if steps is not None and steps > 0 else None), True
        if self.given is None:
            return None
        reference, batch_size = session.lr.reference, session.batch_size
        steps = length_steps(self.given, batch_size, reference)
        if steps == trainer.max_steps:
            return None
        trainer.fit_loop.epoch_loop.max_steps = steps
        return (
            f"max_steps={self.given} (the fit's length at the reference batch size "
            f"{reference}): at batch size {batch_size} the fit trains at most {steps} steps, the "
            "same samples, and a schedule sized from estimated_stepping_batches spans them"
        )


class EpochLength:
    """A fit whose epochs end after ``limit_train_batches`` batches (a number, such as
    ``limit_train_batches=100`` over a corpus too large for an epoch): the batches are taken as
    tuned at the reference batch size, as ``val_check_interval``'s are, and a fit at another
    size trains ``limit_train_batches`` x reference / micro-batch size of its own an epoch,
    rounded down (at least one): the same samples, so that each of the job's epochs is the
    same data at every batch size. Set as the fit's batch size is (`keep`), before its train
    DataLoader is counted and ``configure_optimizers`` runs. Without it, an epoch at 4 x the
    reference trained 4 x the samples, and the server compared epochs of other lengths."""

    def __init__(self) -> None:
        self.given: int | None = None
        """The Trainer's own ``limit_train_batches`` where it is a number (after `keep`; None:
        a fraction of the data, or all of it)."""
        self._read = False

    def keep(self, trainer: Trainer, session: TrialSession) -> str | None:
        """Set the fit's ``limit_train_batches`` for the session's micro-batch size (again
        where the size changes); what it now is, in words (None: nothing changed)."""
        if not self._read:
            limit = trainer.limit_train_batches
            self.given = limit if type(limit) is int and limit >= 1 else None
            self._read = True
        if self.given is None:
            return None
        reference, micro = session.lr.reference, session.micro_batch_size
        batches = own_batches(self.given, session)
        if batches == trainer.limit_train_batches:
            return None
        trainer.limit_train_batches = batches
        return (
            f"limit_train_batches={self.given} (an epoch's batches at the reference batch size "
            f"{reference}): at batches of {micro} an epoch trains {batches} batch"
            f"{'es' if batches != 1 else ''}, the same samples, so that each of the job's "
            "epochs is the same data at every batch size"
        )


class ValidationLength:
    """A fit that validates ``limit_val_batches`` batches (a number) of validation DataLoaders
    that take the training batch size (``batch_size=self.batch_size`` in ``val_dataloader()``,
    as Lightning's DataModule example writes it): the batches are taken as tuned at the
    reference batch size, as ``limit_train_batches``'s are, and a fit at another size validates
    ``limit_val_batches`` x reference / micro-batch size of its own, rounded down (at least
    one), so that every batch size is judged on the same validation samples. Whether they take
    it is seen by building them (``val_dataloader()``, as Lightning's batch size finder builds
    them again at each size it tries) at the fit's size and at the reference's, once the size
    is final (after the memory check) and before the first validation counts its batches
    (`keep`). A DataLoader of a size of its own keeps its batches. Where some take the
    training batch size and others do not (one limit serves them all), or they cannot be built
    before the fit builds them, the fit's first validation says so (`settled` is False:
    `zeus_bso.integrations.lightning_limits.validation_part_warning`)."""

    def __init__(self) -> None:
        self.settled = False
        """Whether `keep` found what the validation DataLoaders take (the first validation has
        nothing to say then)."""

    def keep(self, trainer: Trainer, session: TrialSession, target: Any) -> str | None:
        """Set the fit's ``limit_val_batches`` for the session's micro-batch size, where its
        validation DataLoaders take the training batch size (``target``: where the size goes,
        a `zeus_bso.integrations.lightning_trainer.BatchTarget`, set back to the micro-batch
        size); what it now is, in words (None: nothing changed)."""
        limit, micro = trainer.limit_val_batches, session.micro_batch_size
        reference = session.lr.reference
        # Only a train DataLoader given to the fit takes the size where nothing holds a
        # ``batch_arg_name``: the validation's have nothing to take it from, and are not built.
        if type(limit) is not int or limit < 1 or micro == reference or not target.sets_attribute:
            self.settled = True
            return None
        loop = trainer.fit_loop.epoch_loop.val_loop
        try:
            at_micro = self._sizes(trainer, loop)
            if micro not in at_micro:  # none takes the training batch size
                self.settled = True
                return None
            target.set(reference)
            try:
                at_reference = self._sizes(trainer, loop)
            finally:
                target.set(micro)
        except Exception:  # the fit builds them itself later, and its first validation says
            logger.debug("the validation DataLoaders could not be built early", exc_info=True)
            return None
        follows = [
            size == micro and other == reference
            for size, other in zip(at_micro, at_reference, strict=False)
        ]
        self.settled = len(at_micro) == len(at_reference) and len(set(follows)) == 1
        if not self.settled or not follows[0]:
            return None
        batches = own_batches(limit, session)
        trainer.limit_val_batches = batches
        loop._combined_loader = None  # counted again, at the new limit, where built before
        return (
            f"limit_val_batches={limit} (the validation's batches at the reference batch size "
            f"{reference}): at batches of {micro} it validates {batches} batch"
            f"{'es' if batches != 1 else ''}, the same samples, so that every batch size is "
            "judged on the same validation data"
        )

    @staticmethod
    def _sizes(trainer: Trainer, loop: Any) -> list[int | None]:
        """The batch size of each validation DataLoader ``loop`` would build now."""
        source = loop._data_source
        if not source.is_defined():
            return []
        built = source.dataloader()
        combined = package_of(trainer).combined_loader
        if not isinstance(built, combined):
            built = combined(built, "sequential")
        return [batch_size_of(loader) for loader in built.flattened]


class _Remembered:
    """What a cadence set on each of the script's objects (a module, a callback): the value
    the script wrote and the one set, so that an object fit again (a notebook cell run again)
    keeps what it was written with, and a value the script changed since is its own."""

    def __init__(self) -> None:
        self._written: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        return {}  # a process that unpickles the callback (ddp_spawn) has objects of its own

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._written = weakref.WeakKeyDictionary()


class CheckpointSteps(_Remembered):
    """Lightning's ``ModelCheckpoint(every_n_train_steps=N)``: its steps are taken as tuned at
    the reference batch size, as ``val_check_interval``'s are, and a fit at another size saves
    every N x reference / batch size of its optimizer steps, rounded down (at least one): the
    same samples apart. Set with the batch size (`keep`). Without it, a fit at half the
    reference's size saved twice as many checkpoints, and each save of a large model takes
    time and energy the server charged to the size. The value is the callback's own
    (``_every_n_train_steps``: it has no other way in)."""

    def keep(self, trainer: Trainer, session: TrialSession) -> list[str]:
        """Set each checkpoint callback's steps for the session's batch size (again where the
        size changes); what they now are, in words (empty: nothing changed)."""
        said = []
        for callback in trainer.checkpoint_callbacks:
            steps = getattr(callback, "_every_n_train_steps", None)
            if type(steps) is not int or steps < 1:
                continue
            found = self._written.get(callback)
            written = found[0] if found is not None and found[1] == steps else steps
            every = session.steps_for(written)
            self._written[callback] = (written, every)
            if every == steps:
                continue
            callback._every_n_train_steps = every
            said.append(
                f"ModelCheckpoint(every_n_train_steps={written}) (the steps between checkpoints "
                f"at the reference batch size {session.lr.reference}): at batch size "
                f"{session.batch_size} it saves every {every} step{'s' if every != 1 else ''}, "
                "the same samples apart"
            )
        return said


WARMUP_NAMES = ("warmup_steps", "num_warmup_steps")
"""The names a module's (or datamodule's) hparams give a warm-up's steps, as Lightning's
tutorials write them (``get_linear_schedule_with_warmup(optimizer,
num_warmup_steps=self.hparams.warmup_steps, num_training_steps=...)`` in
``configure_optimizers``)."""


class WarmupSteps(_Remembered):
    """A warm-up of a fixed number of steps: a `WARMUP_NAMES` attribute of 1 or more, on the
    module, the datamodule or their hparams, or a keyword of that name in a module's hparam
    that configures the schedule (a ``functools.partial``, as the Lightning-Hydra template's
    ``scheduler: {_target_: ..., _partial_: true, num_warmup_steps: 500}`` makes one, or a
    mapping the module unpacks into it). Taken as tuned at the reference batch size, as the
    rate is, and set, with the batch size and before ``configure_optimizers``, to the steps
    that see its samples at the run's (`zeus_bso.training.TrialSession.warmup_steps`; with
    ``lr_rule='none'`` the warm-up is the script's). Without it a run at 4 x the reference
    warmed up over 4 x the samples, at 4 x the rate. A module fit again (a notebook cell run
    again) keeps the steps it was written with: the value this set is known as its own (each
    module's warm-up: where it is, the steps it was written with, the steps set)."""

    def keep(self, trainer: Trainer, pl_module: Any, session: TrialSession) -> str | None:
        """Set the fit's warm-up steps for the session's batch size (again where the size
        changes); what they now are, in words (None: nothing changed, or no warm-up found)."""
        package = package_of(trainer)
        found = self._written.get(pl_module)
        if found is None or _warmup_at(package, pl_module, found[0]) != found[2]:
            found = _warmup_of(package, pl_module)
        if found is None:
            return None
        where, written, before = found
        steps = session.warmup_steps(written)
        self._written[pl_module] = (where, written, steps)
        if steps == before:
            return None
        _set_warmup(package, pl_module, where, steps)
        name = where if isinstance(where, str) else f"hparams.{where[0]}'s {where[1]}"
        return (
            f"{name}={written} (the warm-up's steps at the reference batch size "
            f"{session.lr.reference}): at batch size {session.batch_size} it warms up over "
            f"{steps} step{'s' if steps != 1 else ''}, the same samples"
        )


Where = str | tuple[str, str]
"""Where a warm-up's steps are: an attribute (`WARMUP_NAMES`, found as Lightning finds the
batch size's), or a module hparam and its keyword."""


def _warmup_of(package: Any, pl_module: Any) -> tuple[Where, int, int] | None:
    """The module's warm-up of a fixed number of steps (`WarmupSteps`): where it is, its steps
    twice (as written, as set); None: none."""
    for name in WARMUP_NAMES:
        if package.hasattr(pl_module, name):
            value = package.getattr(pl_module, name)
            return (name, value, value) if _is_steps(value) else None
    for key, held in dict(getattr(pl_module, "hparams", None) or {}).items():
        for name in WARMUP_NAMES:
            if _is_steps(value := _keywords(held).get(name)):
                return ((key, name), value, value)
    return None


def _is_steps(value: Any) -> TypeGuard[int]:
    return type(value) is int and value >= 1


def _keywords(held: Any) -> Mapping[str, Any]:
    """The keywords a schedule's hparam gives it: a partial's, or a mapping's items (one it
    can be set in)."""
    if isinstance(held, functools.partial):
        return held.keywords
    return held if isinstance(held, MutableMapping) else {}


def _warmup_at(package: Any, pl_module: Any, where: Where) -> Any:
    if isinstance(where, str):
        return package.getattr(pl_module, where) if package.hasattr(pl_module, where) else None
    key, name = where
    return _keywords(getattr(pl_module, "hparams", {}).get(key)).get(name)


def _set_warmup(package: Any, pl_module: Any, where: Where, steps: int) -> None:
    if isinstance(where, str):
        package.setattr(pl_module, where, steps)
        return
    key, name = where
    held = pl_module.hparams[key]
    if isinstance(held, functools.partial):  # a new one: the script's may be shared
        pl_module.hparams[key] = functools.partial(
            held.func, *held.args, **{**held.keywords, name: steps}
        )
    else:
        held[name] = steps
