"""The HF Trainer's evaluations by steps, the same samples apart at every batch size; and the
run's length and warm-up where its arguments give them in steps (`ReferenceSteps`).

Where the Trainer evaluates every so many optimizer steps (``eval_strategy="steps"``; data
without a length has no epochs to evaluate at), each evaluation is one of the job's epochs. A
step is of the run's batch size: ``eval_steps=100``, tuned at the reference size 16, evaluates
every 1,600 samples there and every 6,400 at 64. The job would compare its sizes by epochs of
other data: its ``max_epochs`` would stop a run at 64 after four times the samples, the run's
data (``num_train_epochs``) would end after a quarter of its evaluations (and the run, before the
server can judge it, unjudged), and it would pay for a quarter of the evaluations. So a run
evaluates every ``eval_steps`` x reference / batch size steps, rounded down, at least as often
(`keep_samples`), and saves its checkpoints by steps the same samples apart too: with its
evaluations where its checkpoints came every so many of them (``load_best_model_at_end`` keeps
the best evaluation's). A fraction of the run's steps (``eval_steps`` or ``save_steps`` below 1)
keeps its samples of itself.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from zeus_bso.integrations.hf_arguments import by_steps
from zeus_bso.scaling.lr import length_steps
from zeus_bso.training import TrialSession


def keep_samples(args: Any, state: Any, session: TrialSession) -> str | None:
    """Have the Trainer (its ``state``, which its loop reads) evaluate the run every
    ``args.eval_steps`` steps of the reference batch size's samples (`evaluate_apart`), and
    save its checkpoints every ``args.save_steps`` of them (`save_apart`); what it now does,
    in words (None: nothing changed: neither by a number of steps, or the run's batch size is
    the reference's)."""
    evaluated = evaluate_apart(args, state, session)
    saved = save_apart(args, state, session)
    return "; ".join(said for said in (evaluated, saved) if said) or None


def evaluate_apart(args: Any, state: Any, session: TrialSession) -> str | None:
    """Set the steps between the run's evaluations (``state.eval_steps``) to hold the samples
    ``args.eval_steps`` held at the reference batch size, rounded down; what it now does, in
    words (None: nothing changed)."""
    every = args.eval_steps
    if not by_steps(args) or every is None or every < 1 or not hasattr(state, "eval_steps"):
        return None
    base, reference, batch_size = int(every), session.lr.reference, session.batch_size
    steps = session.steps_for(base)  # down: at least the reference's evaluations
    if steps == base:
        return None
    state.eval_steps = steps
    return (
        f"eval_steps={base} (the steps between evaluations at the reference batch size "
        f"{reference}): at batch size {batch_size} the run evaluates every {steps} step"
        f"{'s' if steps != 1 else ''}, the same samples apart, so that each of the job's epochs "
        "(an evaluation) is the same data at every batch size"
    )


def save_apart(args: Any, state: Any, session: TrialSession) -> str | None:
    """Set the steps between the run's checkpoints (``state.save_steps``, where
    ``save_strategy="steps"`` and ``save_steps`` is a number) to hold the samples
    ``args.save_steps`` held at the reference batch size: with every so many evaluations where
    ``save_steps`` was a multiple of ``eval_steps`` (``load_best_model_at_end`` keeps the best
    evaluation's), else rounded down. A run at half the reference's size saved twice as often,
    and each save of a large model takes time and energy the server charged to the size. What
    it now does, in words (None: nothing changed)."""
    save, every = args.save_steps, args.eval_steps
    saves_by_steps = str(getattr(args.save_strategy, "value", args.save_strategy)) == "steps"
    if not saves_by_steps or save is None or save < 1 or not hasattr(state, "save_steps"):
        return None
    if by_steps(args) and every is not None and every >= 1 and int(save) % int(every) == 0:
        steps = session.steps_for(int(every)) * (int(save) // int(every))
    else:
        steps = session.steps_for(int(save))
    if steps == int(save):
        return None
    state.save_steps = steps
    return (
        f"save_steps={int(save)} (the steps between checkpoints at the reference batch size "
        f"{session.lr.reference}): the run saves every {steps} step{'s' if steps != 1 else ''}, "
        "the same samples apart"
    )


PHASE_STEPS = ("num_decay_steps", "num_stable_steps")
"""The ``lr_scheduler_kwargs`` of transformers' warmup-stable-decay schedule that are counts of
steps (its warm-up is ``warmup_steps``, its length the run's)."""


class ReferenceSteps:
    """The run's length and warm-up where its arguments give them in steps: taken as tuned at
    the reference batch size, as ``eval_steps`` are, and set on the arguments for the run's
    batch size as the Trainer is built (`keep`), before it builds its schedule:

    - ``max_steps`` (a run bounded by steps, not ``num_train_epochs``): at most ``max_steps`` x
      reference / batch size of the run's steps, rounded up, the same samples and at least as
      many evaluations (whose steps are rounded down), the schedule spanning them. Without
      it, a run at a smaller size ended after fewer evaluations than the job's
      ``max_epochs``, unjudged (released, so the job got it again and again), and one at a
      larger size stopped at the job's ``max_epochs`` partway through its schedule.
    - a fixed ``warmup_steps`` (1 or more; below 1 it is a ratio of the run's steps, which keeps
      its samples of itself), under an ``lr_rule``, whose rates it scales: the steps that warm
      up over the same samples (`zeus_bso.training.TrialSession.warmup_steps`). With
      ``lr_rule='none'`` the rate is the script's, and so is its warm-up.
    - an ``eval_delay`` by steps (``eval_strategy="steps"``), which puts the first evaluation
      off: ``eval_delay`` x reference / batch size of the run's steps, rounded down, as its
      ``eval_steps`` are (by epochs it is epochs, the same at every size).
    - the phases of a warmup-stable-decay schedule (``lr_scheduler_type="warmup_stable_decay"``,
      ``lr_scheduler_kwargs``' `PHASE_STEPS`): x reference / batch size of the run's steps,
      rounded up, as ``max_steps`` is, so that the rate decays over the same samples at the
      run's end (a decay of fixed steps at 4 x the reference decayed over 4 x the samples,
      from a quarter of the way through an epoch of 100 steps tuned at 25)."""

    def __init__(self) -> None:
        self._args: weakref.ref[Any] | None = None  # the arguments set (once)
        self.given: int | None = None
        """The script's own ``max_steps``, where the run's differs (after `keep`)."""

    def keep(self, args: Any, session: TrialSession) -> list[str]:
        """Set the run's ``max_steps`` and ``warmup_steps`` on ``args`` (once: a Trainer built
        again with them keeps them); what changed, in words."""
        if self._args is not None and self._args() is args:
            return []
        self._args = weakref.ref(args)
        reference, batch_size = session.lr.reference, session.batch_size
        said = []
        if (given := int(args.max_steps or 0)) > 0:
            steps = length_steps(given, batch_size, reference)
            if steps != given:
                self.given, args.max_steps = given, steps
                said.append(
                    f"max_steps={given} (the run's length at the reference batch size "
                    f"{reference}): at batch size {batch_size} the run trains at most {steps} "
                    "steps, the same samples, and the Trainer's schedule spans them"
                )
        if (warmup := args.warmup_steps or 0) >= 1:
            steps = session.warmup_steps(int(warmup))
            if steps != int(warmup):
                args.warmup_steps = steps
                said.append(
                    f"warmup_steps={int(warmup)} (tuned at the reference batch size "
                    f"{reference}): at batch size {batch_size} the warm-up takes {steps} steps, "
                    "the same samples"
                )
        held = getattr(args, "lr_scheduler_kwargs", None)
        kwargs: dict[str, Any] = held if isinstance(held, dict) else {}
        for name in PHASE_STEPS if kwargs else ():
            if type(phase := kwargs.get(name)) is int and phase >= 1:
                steps = length_steps(phase, batch_size, reference)
                if steps != phase:
                    args.lr_scheduler_kwargs = kwargs = {**kwargs, name: steps}
                    said.append(
                        f"lr_scheduler_kwargs' {name}={phase} (steps of the reference batch size "
                        f"{reference}): at batch size {batch_size} the phase takes {steps} "
                        "steps, the same samples"
                    )
        if by_steps(args) and (delay := getattr(args, "eval_delay", 0) or 0) >= 1:
            steps = session.steps_for(int(delay))  # down, as its eval_steps
            if steps != int(delay):
                args.eval_delay = steps
                said.append(
                    f"eval_delay={int(delay)} (steps of the reference batch size {reference}): "
                    f"at batch size {batch_size} the first evaluation waits {steps} steps, the "
                    "same samples"
                )
        return said


def evaluations(args: Any, state: Any) -> int | None:
    """The evaluations a run by steps makes before the Trainer's ``num_train_epochs`` end it
    (its ``max_steps`` over the steps between evaluations); None: not known here (evaluations
    at epochs' ends, a ``max_steps`` of the arguments', or no length)."""
    total, every = int(state.max_steps or 0), getattr(state, "eval_steps", None)
    if not by_steps(args) or args.max_steps > 0 or total <= 0 or not every or every < 1:
        return None
    return total // int(every)


def evaluations_below(args: Any, state: Any, max_epochs: int) -> str | None:
    """Where the run's data (``num_train_epochs``) ends it after fewer evaluations than the
    job's ``max_epochs``: what to set. None: it makes enough, or it is not known."""
    made = evaluations(args, state)
    if made is None or made >= max_epochs:
        return None
    epochs = float(args.num_train_epochs)
    needed = math.ceil(epochs * max_epochs / made) if made else None
    fix = f"set num_train_epochs={needed}" if needed else "evaluate more often"
    return (
        f"TrainingArguments(num_train_epochs={epochs:g}) ends the run after {made} evaluation"
        f"{'s' if made != 1 else ''} (every {state.eval_steps} steps), before the job's "
        f"max_epochs ({max_epochs} evaluations): a run that has not reached the target by "
        f"then ends before the server can judge it, and delivers no model; {fix} (the server "
        "stops the run)"
    )
