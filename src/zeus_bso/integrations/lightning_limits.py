"""The Trainer's own limits against the server's stop, for `ZeusBSOCallback`: where a fit
validates (at epochs' ends, every few epochs, within epochs), the validation the server stops a
run at, and what in the Trainer's ``max_epochs``, ``max_steps``, ``max_time``,
``limit_train_batches``, ``min_epochs`` and ``min_steps`` may end a fit before the server can
judge it or keep it training after: said when the fit starts, and in the run's end."""

from __future__ import annotations

import datetime
import logging
import math
from typing import Any

from zeus_bso.integrations.lightning_packages import is_a
from zeus_bso.integrations.loaders import batch_size_of, flattened

logger = logging.getLogger(__name__)

Trainer = Any
"""A Trainer of either Lightning package."""


def validates_at_epoch_ends(trainer: Trainer) -> bool:
    """Whether the fit validates at the end of an epoch only (every epoch, or every
    ``check_val_every_n_epoch``): then each report carries the fit's epoch count; otherwise
    (``val_check_interval`` below 1, or a number of batches) each validation counts as one."""
    interval = trainer.val_check_interval
    return isinstance(interval, float) and interval == 1.0


def warn_of_interval(trainer: Trainer, job_max_epochs: int) -> bool:
    """When training starts, where validations within epochs are reported as epochs: it says
    so (each is the same samples apart at every batch size:
    `zeus_bso.integrations.lightning_cadence`), and where the Trainer's ``max_epochs`` allows
    fewer of them than the job's ``max_epochs`` (`validations_below`), warns of it. Whether the
    fit validates within epochs."""
    if validates_at_epoch_ends(trainer):
        return False
    if not trainer.is_global_zero:
        return True
    logger.info(
        "zeus-bso: val_check_interval=%s: each validation is one of the job's epochs (it stops "
        "at the job's max_epochs, %d validations), the same samples apart at every batch size",
        trainer.val_check_interval,
        job_max_epochs,
    )
    if below := validations_below(trainer, job_max_epochs):
        logger.warning("%s", below)
    return True


def _epoch_limit_below(trainer: Trainer, job_max_epochs: int) -> int | None:
    """The Trainer's ``max_epochs`` where it ends the fit before the validation the server
    stops it at (`judged_at`: the job's max_epochs, or the validation after them); None: it
    does not."""
    if not validates_at_epoch_ends(trainer):  # its validations are counted (`validations`)
        return None
    limit = trainer.max_epochs
    needed = judged_at(trainer, job_max_epochs)
    return limit if limit is not None and 0 <= limit < needed else None


def validation_every(trainer: Trainer) -> int:
    """The epochs between the fit's validations where it validates at the end of epochs
    (``check_val_every_n_epoch``); 1 where it validates every epoch, or within epochs (each
    validation is then an epoch of the job's)."""
    every = trainer.check_val_every_n_epoch
    at_ends = validates_at_epoch_ends(trainer)
    return every if at_ends and isinstance(every, int) and every > 1 else 1


def judged_at(trainer: Trainer, job_max_epochs: int) -> int:
    """The epoch at whose validation the server stops a fit that has not reached the target:
    the job's ``max_epochs``, or, where the fit validates every few epochs, the first
    validation at or after them (a report at or past the job's max_epochs ends the run)."""
    every = validation_every(trainer)
    return -(-job_max_epochs // every) * every


def _step_limit(trainer: Trainer) -> int | None:
    """The Trainer's ``max_steps`` where it has one (None: -1, no limit)."""
    steps = trainer.max_steps
    return steps if steps is not None and steps >= 0 else None


def _validation_batches(trainer: Trainer, every: int | None) -> int | None:
    """The training batches between validations where the fit validates every so many batches
    across epochs (``val_check_interval`` a number, ``check_val_every_n_epoch=None``: a
    dataset without a length, say; ``every``: the fit's own, where not the Trainer's
    interval); None otherwise."""
    interval = trainer.val_check_interval
    if isinstance(interval, int) and trainer.check_val_every_n_epoch is None:
        return every or interval
    return None


def limit_warnings(
    trainer: Trainer,
    job_max_epochs: int,
    every: int | None = None,
    given: int | None = None,
    part: int | None = None,
) -> list[str]:
    """What in the Trainer's own limits may end a fit before the server can judge it
    (``every``: the batches between the fit's validations, where it validates every so many,
    `zeus_bso.integrations.lightning_cadence.batches_apart`; ``given``: the Trainer's own
    ``max_steps``, tuned at the reference batch size as ``val_check_interval`` is, where the
    fit's differs: `zeus_bso.integrations.lightning_cadence.FitLength`; ``part``: its own
    ``limit_train_batches``, a number, where the fit's differs:
    `zeus_bso.integrations.lightning_cadence.EpochLength`)."""
    found = [said for said in (_epochs_judged(trainer, job_max_epochs), _kept_on(trainer)) if said]
    part = part or trainer.limit_train_batches
    if part is not None and (isinstance(part, int) or part != 1.0):  # an int counts batches
        found.append(
            f"Trainer(limit_train_batches={part}): each epoch trains part of the data, and the "
            "server charges the job's epochs at that part; every run of the job must train the "
            "same part (a run with another limit, say a quick debugging run, makes its batch "
            "size look cheaper or dearer than it is): debug with fast_dev_run=True or "
            "overfit_batches, which run without the optimizer"
        )
    steps = _step_limit(trainer)
    if given is not None:  # both of the reference's steps, as the script wrote them
        steps, every, accumulated = given, _validation_batches(trainer, None), 1
    else:
        every, accumulated = _validation_batches(trainer, every), trainer.accumulate_grad_batches
    if steps is not None and every is not None:
        # Each validation is an epoch of the job's: the server stops the fit at the job's
        # max_epochs validations, unless max_steps ends it first.
        needed = math.ceil(job_max_epochs * every / max(1, accumulated))
        if steps < needed:
            found.append(
                f"Trainer(max_steps={steps}) ends the fit before the job's max_epochs "
                f"({job_max_epochs}) validations of every {every} batches: a fit that has not "
                "reached the target by then ends before the server can judge it and is not "
                "counted, so the job learns nothing of its batch size; set max_steps to at "
                f"least {needed} (the server stops the fit)"
            )
    elif steps is not None and (epochs := _epochs_of_steps(trainer)) < job_max_epochs:
        length = (
            f"{epochs:.3g} epochs"
            if math.isfinite(epochs)
            else f"{steps} optimizer steps (of the reference batch size's samples)"
        )
        found.append(
            f"Trainer(max_steps={steps}) ends the fit after {length}: a fit that has not "
            "reached the target by then ends before the server can judge it and is not "
            "counted, so the job learns nothing of its batch size (the next run gets it "
            "again); bound the fit by the job's max_epochs instead (max_epochs="
            f"{job_max_epochs}, max_steps=-1: the server stops the fit)"
        )
    return found


def _epochs_of_steps(trainer: Trainer) -> float:
    """The epochs the fit's ``max_steps`` make, where its batches an epoch are counted (from
    ``on_train_start``; the optimizer steps an epoch are its batches over the accumulation,
    the last step taking what is left); infinity where not."""
    batches, steps = trainer.num_training_batches, _step_limit(trainer)
    if steps is None or batches in (None, float("inf")) or not batches:
        return float("inf")
    return float(steps / math.ceil(batches / max(1, trainer.accumulate_grad_batches)))


def _epochs_judged(trainer: Trainer, job_max_epochs: int) -> str | None:
    """Where the Trainer's ``max_epochs`` ends the fit before the validation the server stops
    it at (`judged_at`), or a fit that validates every few epochs trains past the job's
    max_epochs to the validation after them: what to do about it. None: neither."""
    every, judged = validation_every(trainer), judged_at(trainer, job_max_epochs)
    limit = _epoch_limit_below(trainer, job_max_epochs)
    if limit is not None and limit < job_max_epochs:
        return (
            f"Trainer(max_epochs={limit}) is below the job's max_epochs ({job_max_epochs}): a "
            "fit that needs more epochs ends before the server can judge it, and delivers no "
            f"model; give the Trainer max_epochs={judged} (the server stops the fit)"
        )
    if limit is not None:
        return (
            f"Trainer(check_val_every_n_epoch={every}) validates at epochs {every}, "
            f"{2 * every}, ...: the server judges the job's max_epochs ({job_max_epochs}) at the "
            f"validation of epoch {judged}, after the Trainer's max_epochs ({limit}), so a fit "
            f"that has not reached the target by epoch {limit - limit % every} ends before the "
            f"server can judge it, and delivers no model; give the Trainer max_epochs={judged} "
            "(the server stops the fit), or validate every epoch"
        )
    if judged != job_max_epochs:
        return (
            f"Trainer(check_val_every_n_epoch={every}): the job's max_epochs ({job_max_epochs}) "
            f"is not a multiple of it, so a run that has not reached the target by epoch "
            f"{job_max_epochs} trains to epoch {judged}, the validation after it, before the "
            "server stops it (a job's max_epochs that is a multiple of it stops it there)"
        )
    return None


def _kept_on(trainer: Trainer) -> str | None:
    """Where the Trainer's ``min_epochs`` or ``min_steps`` keeps the fit training after the
    server's stop (Lightning defers a stop until they are met): what to do about it. None:
    neither is set (``min_epochs`` of 1, which ``min_steps`` alone implies, stops nothing the
    server would: it stops at a validation, after an epoch)."""
    floors = []
    if (epochs := trainer.min_epochs) is not None and epochs > 1:
        floors.append(f"min_epochs={epochs}")
    if (steps := trainer.min_steps) is not None and steps > 0:
        floors.append(f"min_steps={steps}")
    if not floors:
        return None
    return (
        f"Trainer({', '.join(floors)}) keeps the fit training after the server stops it (at the "
        "target, or the job's max_epochs) until it is met: the epochs after that stop take "
        "their time and energy past the run the server judged, and are not counted; remove it "
        "(the server stops the fit)"
    )


def ended_early(trainer: Trainer, job_max_epochs: int) -> str:
    """Why a fit ended before the server's stop, where neither the server nor an EarlyStopping
    ended it."""
    if (steps := _step_limit(trainer)) is not None and steps <= trainer.global_step:
        return f"the Trainer's max_steps ({steps}) ended it before the server's stop"
    made = validations(trainer)
    if made is not None and made < job_max_epochs and trainer.current_epoch >= trainer.max_epochs:
        return (
            f"the Trainer's max_epochs ({trainer.max_epochs}) ended it after {made} validations, "
            f"before the job's max_epochs ({job_max_epochs} validations) and the server's stop"
        )
    if (limit := _epoch_limit_below(trainer, job_max_epochs)) is not None:
        if limit < job_max_epochs:
            return (
                f"the Trainer's max_epochs ({limit}) is below the job's ({job_max_epochs}), "
                "so it ended before the server's stop"
            )
        every = validation_every(trainer)
        return (
            f"the Trainer's max_epochs ({limit}) ended it before its validation of epoch "
            f"{judged_at(trainer, job_max_epochs)} (check_val_every_n_epoch={every}), where "
            "the server stops it"
        )
    if (timed := _timed_out(trainer)) is not None:
        return (
            f"the Trainer's max_time ({timed}) ended it before the server's stop (fit again "
            "from its checkpoint, ckpt_path=..., to continue the trial)"
        )
    return "the fit ended before the server's stop (a limit of the Trainer's, or a callback)"


def _timed_out(trainer: Trainer) -> str | None:
    """The Trainer's ``max_time`` (its ``Timer`` callback's duration, in words) where it ran
    out; None otherwise."""
    for callback in trainer.callbacks:
        remaining = callback.time_remaining() if is_a(callback, "Timer") else None
        if remaining is not None and remaining <= 0:  # None: a Timer without a duration
            duration = callback.time_elapsed() + remaining
            return str(datetime.timedelta(seconds=round(duration)))
    return None


def validations(trainer: Trainer) -> int | None:
    """The validations a fit that validates within epochs makes before the Trainer's
    ``max_epochs`` ends it; None: not counted here (it validates at epochs' ends, it has no
    ``max_epochs`` or its data no length)."""
    epochs, batches = trainer.max_epochs, trainer.num_training_batches
    checked = trainer.val_check_batch
    if validates_at_epoch_ends(trainer) or epochs is None or epochs < 0:
        return None
    if batches in (None, float("inf")) or not isinstance(checked, int) or checked < 1:
        return None
    if trainer.check_val_every_n_epoch is None:  # every so many batches, across epochs
        return int(epochs * batches) // checked
    per_epoch = int(batches) // checked
    return int(epochs) // int(trainer.check_val_every_n_epoch) * per_epoch


def validations_below(trainer: Trainer, job_max_epochs: int) -> str | None:
    """Where the Trainer's ``max_epochs`` ends a fit that validates within epochs after fewer
    validations than the job's ``max_epochs``: what to set. None: it makes enough, or they
    are not counted here."""
    made = validations(trainer)
    if made is None or made >= job_max_epochs:
        return None
    epochs = trainer.max_epochs
    needed = math.ceil(epochs * job_max_epochs / made) if made else None
    fix = f"give the Trainer max_epochs={needed}" if needed else "validate more often"
    return (
        f"Trainer(max_epochs={epochs}) ends the fit after {made} validation"
        f"{'s' if made != 1 else ''} (every {trainer.val_check_batch} batches), before the "
        f"job's max_epochs ({job_max_epochs} validations): a fit that has not reached the target "
        f"by then ends before the server can judge it, and delivers no model; {fix} (the "
        "server stops the fit)"
    )


def validation_part_warning(trainer: Trainer, micro_batch_size: int, reference: int) -> str | None:
    """Where ``limit_val_batches`` is a number of batches of a validation DataLoader whose batch
    size is the fit's own (``batch_size=self.batch_size`` in ``val_dataloader``, as Lightning's
    DataModule example writes it): each batch size is judged on other validation samples. Said
    where `zeus_bso.integrations.lightning_cadence.ValidationLength` could not set the limit
    (some of the DataLoaders take the training batch size and others do not, or they could not
    be built before the fit built them), once they are built, and only at a size other than the
    reference (there, a DataLoader that follows the size looks like one of a size of its own;
    at another, one of a size of its own may have the run's by chance, so the words say
    "where"). None: nothing to say."""
    limit = trainer.limit_val_batches
    if type(limit) is not int or limit < 1 or micro_batch_size == reference:
        return None
    built = trainer.val_dataloaders
    loaders = [] if built is None else flattened(built)
    if not any(batch_size_of(loader) == micro_batch_size for loader in loaders):
        return None
    return (
        f"Trainer(limit_val_batches={limit}) validates {limit} batches of a validation "
        f"DataLoader whose batch size is the run's ({micro_batch_size}): where it takes the "
        "training batch size (batch_size=self.batch_size), each batch size is judged on other "
        f"validation samples ({limit * micro_batch_size} here, {limit * reference} at the "
        f"reference batch size {reference}), so the server compares metrics of other data; "
        "give the validation DataLoader a batch size of its own, or limit_val_batches a fraction"
    )
