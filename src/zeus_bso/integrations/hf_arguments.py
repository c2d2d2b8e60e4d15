"""What the Hugging Face callback checks of the Trainer's ``TrainingArguments`` before a run
trains: that it trains the batch the server dispatched and evaluates, so that the server can
judge it (a refusal otherwise), and that its epochs and evaluations count as the job's do (a
warning otherwise); and, of an evaluation without the metric, whether the Trainer computed any
metric at all (`loss_alone`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from zeus_bso.integrations.loaders import batch_size_of, no_batch_words, sized_len
from zeus_bso.integrations.schedules import length_of, schedule_refusal

logger = logging.getLogger("zeus_bso.integrations.huggingface")  # the callback's

SEARCH_REFUSED = (
    "Trainer.hyperparameter_search: each of its trials trains other hyperparameters (its "
    "hp_space), so they are not recurrences of one job and the server would learn the batch "
    "size from runs of different jobs (the first trial would be charged to the job as a run of "
    "it): search without ZeusBSOTrainerCallback, then train the configuration it found with it "
    "(with an lr_rule, pass the search's batch size as reference_batch_size: the rate it found "
    "was tuned at that size)"
)
"""The refusal of a Trainer that trains a trial of ``hyperparameter_search``."""


def evaluates_itself(trainer: Any) -> bool:
    """Whether ``trainer``'s class evaluates its own way: it overrides the Trainer's
    ``evaluate`` or ``evaluation_loop`` outside Transformers (whose ``Seq2SeqTrainer`` only
    passes generation settings on), and may add metrics of its own beside
    ``compute_metrics``'s, as sentence-transformers' ``SentenceTransformerTrainer`` adds its
    evaluator's with ``prediction_loss_only=True`` (its arguments' default). Whether the
    job's metric is among them is seen at the first evaluation."""
    from transformers import Trainer

    own = (getattr(type(trainer), name, None) for name in ("evaluate", "evaluation_loop"))
    return isinstance(trainer, Trainer) and any(
        function is not None and not function.__module__.startswith("transformers.")
        for function in own
    )


def set_by_hand(args: Any, trainer: Any) -> str | None:
    """Why the callback cannot set the run's batch size on ``args`` as ``trainer`` is built, in
    words that follow "but": what read the batch size as they were built and keeps it
    (DeepSpeed's configuration, its ``train_micro_batch_size_per_gpu`` and accumulation steps,
    given in the arguments or by ``accelerate launch``; the generation batch of TRL's GRPO).
    None: it can (`take_batch_size`)."""
    if getattr(args, "deepspeed", None) or getattr(trainer, "is_deepspeed_enabled", False):
        return (
            "DeepSpeed's configuration took its batch size from TrainingArguments as the "
            "Trainer was built"
        )
    if getattr(args, "generation_batch_size", None) is not None:
        return (
            f"{type(args).__name__} sized its generation batch from the batch size as it was built"
        )
    return None


def take_batch_size(
    args: Any, trainer: Any, micro_batch_size: int, accumulation_steps: int | None
) -> str | None:
    """Set the run's per-device batch size on ``args``, and on the ``trainer`` being built,
    which took its own from them (its ``_train_batch_size``, which its training loop and
    ``get_train_dataloader`` read); and, where the run accumulates (``accumulation_steps`` not
    None), its micro-batches an optimizer step, which the Trainer reads from ``args`` when it
    trains. What it changed, in words; None: the arguments said so already."""
    said = (args.per_device_train_batch_size, args.gradient_accumulation_steps)
    args.per_device_train_batch_size = micro_batch_size
    if accumulation_steps is not None:
        args.gradient_accumulation_steps = accumulation_steps
    trainer._train_batch_size = args.train_batch_size
    if said == (args.per_device_train_batch_size, args.gradient_accumulation_steps):
        return None
    now = f"per_device_train_batch_size={micro_batch_size}"
    before = f"{said[0]}"
    if accumulation_steps is not None:
        now += f", gradient_accumulation_steps={accumulation_steps}"
        before += f" and {said[1]}"
    return f"the Trainer trains at the server's batch size: {now} (TrainingArguments said {before})"


def refusal(
    args: Any,
    *,
    micro_batch_size: int,
    batch_size: int,
    accumulation_steps: int,
    accumulates: bool,
    metric: str,
    evaluates_itself: bool = False,
) -> str | None:
    """Why a run with ``args`` cannot be judged at the dispatched ``batch_size`` (trained as
    ``accumulation_steps`` micro-batches of ``micro_batch_size`` where the callback
    ``accumulates``) by its evaluations' ``metric``, in words that say what to change; None: it
    can. ``evaluates_itself``: the Trainer's class evaluates its own way (`evaluates_itself`),
    so that its metrics do not come from ``compute_metrics`` alone."""
    if accumulates and args.auto_find_batch_size:
        return (
            "TrainingArguments(auto_find_batch_size=True) shrinks the batch size at an "
            "out-of-memory error, while max_micro_batch_size keeps it and accumulates smaller "
            "micro-batches: choose one (leave auto_find_batch_size False to accumulate)"
        )
    if args.per_device_train_batch_size != micro_batch_size:
        return (
            f"TrainingArguments.per_device_train_batch_size is "
            f"{args.per_device_train_batch_size} but the optimizer chose {micro_batch_size}: "
            "leave the size the callback set as the Trainer was built, or build "
            "TrainingArguments with per_device_train_batch_size=callback.start() (or, "
            "where HfArgumentParser built them from the command line, set "
            "training_args.per_device_train_batch_size = callback.start() before the Trainer "
            "is built)"
        )
    steps = args.gradient_accumulation_steps
    if not accumulates and steps != 1:
        return (
            f"TrainingArguments.gradient_accumulation_steps is {steps}: each optimizer step "
            f"would take {steps} x {micro_batch_size} samples while the server charges batch "
            f"size {batch_size}; to accumulate, pass ZeusBSOTrainerCallback("
            "max_micro_batch_size=...), which sets gradient_accumulation_steps as the Trainer "
            "is built (a script that calls callback.start() first builds TrainingArguments "
            "with gradient_accumulation_steps=callback.accumulation_steps)"
        )
    if accumulates and steps != accumulation_steps:
        return (
            f"TrainingArguments.gradient_accumulation_steps is {steps} but batch size "
            f"{batch_size} trains as {accumulation_steps} micro-batches of {micro_batch_size}: "
            "build TrainingArguments with gradient_accumulation_steps=callback.accumulation_steps"
        )
    if args.prediction_loss_only and not metric.endswith("_loss") and not evaluates_itself:
        return (
            f"TrainingArguments(prediction_loss_only=True) evaluates the loss alone: '{metric}' "
            f"is never computed, so the server could not judge batch size {batch_size} (its "
            "trial is released, not charged); set prediction_loss_only=False (the Trainer's "
            "compute_metrics then computes it), or judge runs by the loss: metric='eval_loss' "
            "and a JobSpec with higher_is_better_metric=False"
        )
    if evaluation_strategy(args) == "no":
        return (
            "eval_strategy='no': this run never evaluates, so the server could not judge "
            f"batch size {batch_size} (its trial is released, not charged); evaluate every epoch "
            "(eval_strategy='epoch'), or train without ZeusBSOTrainerCallback"
        )
    return None


def loader_refusal(
    loader: Any, args: Any, batch_size: int, trainers: int | None = None
) -> str | None:
    """Why the Trainer's train DataLoader (``loader``, as ``on_train_begin`` gets it) cannot
    train the run dispatched ``batch_size``: its batches are not the size ``args`` give
    (``per_device_train_batch_size`` times the GPUs of the Trainer's own DataParallel:
    ``args.train_batch_size``), so that the run would train at one size while the server
    charges another: the size was set on the arguments after the Trainer was built, which had
    taken its own from them (``trainers``: the Trainer's, ``state.train_batch_size``), or a
    subclass's ``get_train_dataloader()`` builds the loader at a size of its own. None: it takes
    that size, or says none (a dataset that yields whole batches; Accelerate's
    ``dispatch_batches``, whose main process loads the batches of all)."""
    found = batch_size_of(loader)
    expected = args.train_batch_size
    if found is None or found == expected or type(loader).__name__ == "DataLoaderDispatcher":
        return None
    if found == trainers:
        fix = (
            f"the Trainer took {found} from its TrainingArguments when it was built, before "
            "per_device_train_batch_size was set on them: give the callback to the Trainer as "
            "it is built (Trainer(callbacks=[callback])), which sets it, or set it before "
            "(TrainingArguments(per_device_train_batch_size=callback.start(), ...))"
        )
    else:
        fix = (
            "where a Trainer subclass's get_train_dataloader() builds the DataLoader, build it "
            "with batch_size=self._train_batch_size (or self.args.train_batch_size)"
        )
    return (
        f"the Trainer's train DataLoader takes batches of {found} samples, but this run's "
        f"batch size is {batch_size} (per_device_train_batch_size "
        f"{args.per_device_train_batch_size}: batches of {expected}), and the server would "
        f"charge {batch_size} for a run that trains at another size: {fix}; the run is not "
        "counted against the batch size"
    )


def schedule_refused(
    args: Any, state: Any, scheduler: Any, batch_size: int, written_for: int, max_epochs: int
) -> str | None:
    """Why the run cannot take ``scheduler``, one that anneals over a length fixed when it was
    built (`zeus_bso.integrations.schedules.schedule_refusal`), not the run's ``state.max_steps``
    at ``batch_size``: a script's own, given as ``Trainer(optimizers=(optimizer, scheduler))``
    and sized for ``written_for`` (the job's reference size). The Trainer's own schedule is
    built for the run's steps. None: it fits, or it has no length."""
    length = length_of(scheduler) if scheduler is not None else None
    steps = int(state.max_steps or 0)
    if length is None or steps <= 0:
        return None
    epochs = float(args.num_train_epochs)
    may_train = steps
    if args.max_steps <= 0 and epochs > max_epochs:  # the job's max_epochs ends it first
        may_train = math.ceil(steps * max_epochs / epochs)
    why = schedule_refusal([length], steps, may_train, batch_size, written_for)
    if why is None:
        return None
    return (
        f"{why}; let the Trainer build the schedule for the run's steps "
        "(TrainingArguments(lr_scheduler_type=..., warmup_steps=...)), or build yours in a "
        "Trainer subclass's create_scheduler(num_training_steps, optimizer), which the Trainer "
        "calls with the run's steps (the run is not counted against the batch size)"
    )


def warn(args: Any, max_epochs: int, loader: Any, *, max_steps: int | None = None) -> None:
    """Log the `warnings` of ``args`` (``loader``: the Trainer's train DataLoader, None where
    not known; ``max_steps``: the script's own, where the run's differs), and how a run on data
    without a length (no epochs) or evaluated by steps counts its epochs."""
    from transformers.trainer_utils import has_length

    sized = loader is None or has_length(loader)
    per_epoch = (
        len(loader) // max(1, args.gradient_accumulation_steps)
        if loader is not None and sized
        else 0
    )
    said = warnings(args, max_epochs, sized=sized, per_epoch=per_epoch, max_steps=max_steps)
    for warning in said:
        logger.warning("%s", warning)
    if not sized or by_steps(args):
        logger.info(
            "zeus-bso: %s each evaluation is one of the job's epochs (it stops at the job's "
            "max_epochs, %d evaluations), the same samples apart at every batch size",
            "training data without a length:" if not sized else "eval_strategy='steps':",
            max_epochs,
        )


def warnings(
    args: Any,
    max_epochs: int,
    *,
    sized: bool = True,
    per_epoch: int = 0,
    max_steps: int | None = None,
) -> list[str]:
    """What in ``args`` makes the run count otherwise than the job (``max_epochs``) does
    (``sized``: whether the training data has a length, and so epochs; ``per_epoch``: the run's
    optimizer steps an epoch, 0 where not known; ``max_steps``: the script's own, tuned at the
    reference batch size as ``eval_steps`` are, where ``args`` hold the run's:
    `zeus_bso.integrations.hf_cadence.ReferenceSteps`)."""
    found = []
    evaluated_by_steps = by_steps(args)
    run_steps = int(args.max_steps)
    given = run_steps if max_steps is None else max_steps
    epochs = args.num_train_epochs if run_steps <= 0 else None
    # By steps, the job's epochs are evaluations: the run's own count (`hf_cadence`) is judged.
    if epochs is not None and epochs < max_epochs and not evaluated_by_steps:
        found.append(
            f"TrainingArguments(num_train_epochs={epochs}) is below the job's max_epochs "
            f"({max_epochs}): a run that needs more epochs ends before the server can judge it, "
            f"and delivers no model; set num_train_epochs={max_epochs} (the server stops the run)"
        )
    if run_steps > 0 and evaluated_by_steps:
        # Each evaluation is an epoch of the job's: the server stops the run at the job's
        # max_epochs evaluations, unless max_steps ends it first (both of the same steps).
        every = evaluation_interval(args, given)
        if given < max_epochs * every:
            found.append(
                f"TrainingArguments(max_steps={given}) ends the run before the job's "
                f"max_epochs ({max_epochs}) evaluations of every {every} steps: a run that has "
                "not reached the target by then ends before the server can judge it and is not "
                "counted, so the job learns nothing of its batch size; set max_steps to at "
                f"least {max_epochs * every} (the server stops the run)"
            )
    elif run_steps > 0 and (not per_epoch or run_steps < max_epochs * per_epoch):
        length = f"{run_steps / per_epoch:.3g} epochs" if per_epoch else f"{given} optimizer steps"
        found.append(
            f"TrainingArguments(max_steps={given}) ends the run after {length}: a run that has "
            "not reached the target by then ends before the server can judge it and is not "
            "counted, so the job learns nothing of its batch size (the next run gets it "
            f"again); bound the run by the job's max_epochs instead (num_train_epochs="
            f"{max_epochs}, max_steps=-1: the server stops the run)"
        )
    return found


def precision(args: Any) -> str:
    """The precision the Trainer trains in, as its arguments name it: ``bf16``, ``fp16`` or
    ``32``."""
    return "bf16" if args.bf16 else "fp16" if args.fp16 else "32"


def evaluation_interval(args: Any, max_steps: int) -> int:
    """The steps between evaluations by steps (``eval_steps``, a fraction of ``max_steps``
    below 1, as the Trainer takes it; ``logging_steps`` without it)."""
    every = args.eval_steps or args.logging_steps
    if every < 1:
        return max(1, math.ceil(float(every) * max_steps))
    return int(every)


def evaluation_strategy(args: Any) -> str:
    """``args.eval_strategy`` in words (an enum in recent versions)."""
    return str(getattr(args.eval_strategy, "value", args.eval_strategy))


def by_steps(args: Any) -> bool:
    """Whether the Trainer evaluates every so many steps (``eval_strategy="steps"``)."""
    return evaluation_strategy(args) == "steps"


def epochs_trained(args: Any, state: Any) -> int | None:
    """The run's epochs at an evaluation where the Trainer evaluates at epochs' ends
    (``eval_strategy="epoch"``): its epoch count, one begun counting whole. Reported with it,
    an evaluation is judged at its epoch, not as the one after the last reported: with
    ``eval_delay=2`` the first evaluation, after two epochs, counted as the first, and a run
    of the job's ``max_epochs`` ended with fewer reports, unjudged. None: evaluations by steps,
    each an epoch of the job's."""
    if evaluation_strategy(args) != "epoch" or state.epoch is None:
        return None
    return max(1, math.ceil(float(state.epoch) - 1e-6))  # 3.0000001: 3; 2.5: 3


_BESIDE_METRICS = ("_loss", "_runtime", "_samples_per_second", "_steps_per_second")
"""What the Trainer's evaluation measures of its own, beside what ``compute_metrics`` returns."""


def loss_alone(metrics: Mapping[str, object], metric: str) -> str:
    """What to add to the words of an evaluation without ``metric`` where the Trainer computed
    nothing beside the loss and its own timings (it has no ``compute_metrics``, or the
    evaluation saw no samples: no loss either, and none a second), else ''."""
    if any(k != "epoch" and not k.endswith(_BESIDE_METRICS) for k in metrics):
        return ""
    rates = [v for k, v in metrics.items() if k.endswith("_samples_per_second")]
    if rates and not any(k.endswith("_loss") for k in metrics) and not any(map(_positive, rates)):
        return (
            "; the evaluation saw no samples (no loss, 0 samples a second): the Trainer's "
            "eval_dataset is empty, or its DataLoader yields nothing"
        )
    name = metric.split("_", 1)[1] if "_" in metric else metric
    return (
        f"; the Trainer computed none beside the loss: give it compute_metrics=... returning "
        f"'{name}' (the Trainer reports it as '{metric}')"
    )


def _positive(value: object) -> bool:
    """Whether a figure of the Trainer's metrics is a number above 0."""
    try:
        return float(value) > 0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def no_batches(
    args: Any, dataset: Any, micro_batch_size: int, accumulates: bool = False
) -> str | None:
    """Why the Trainer would make no training batch at ``micro_batch_size`` (``accumulates``:
    the micro-batch of a run that accumulates, not its batch size): its train
    ``dataset`` holds fewer samples a process than the size, and ``dataloader_drop_last`` drops
    the short one (HF then raises "args.max_steps must be set to a positive value if dataloader
    does not have a length"). None: it makes some, or its data has no length."""
    samples = sized_len(dataset)  # None: an iterable dataset, or none
    if not getattr(args, "dataloader_drop_last", False) or samples is None:
        return None
    each = samples // max(1, int(getattr(args, "world_size", 1) or 1))
    if each >= micro_batch_size:
        return None
    what = "micro-batch" if accumulates else "batch size"
    return no_batch_words(
        f"{what} {micro_batch_size}",
        f"the train dataset holds {samples} samples ({each} a process), and "
        "dataloader_drop_last=True drops the last, short batch",
        each,
        "train with dataloader_drop_last=False",
    )


def evaluation_ran_out(args: Any) -> str:
    """What a run says where the Trainer's ``auto_find_batch_size`` caught out of memory in its
    evaluation and would train again at a smaller batch size, which cannot help."""
    return (
        "the Trainer's evaluation ran out of memory (per_device_eval_batch_size "
        f"{args.per_device_eval_batch_size}), and auto_find_batch_size would lower the training "
        "batch size, which does not change the evaluation's: lower per_device_eval_batch_size, "
        "or set eval_accumulation_steps (what the evaluation gathers moves to the CPU every so "
        "many steps); not counted against the batch size"
    )
