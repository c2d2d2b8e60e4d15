"""How an HF Trainer's run ends, where the callback's trial did not end before: at the server's
stop, by the Trainer's ``EarlyStoppingCallback`` below the target, or by the Trainer's own
limits first (`end_training`)."""

from __future__ import annotations

from typing import Any

from zeus_bso.integrations.hf_arguments import by_steps
from zeus_bso.spec import StopReason
from zeus_bso.training import TrialSession


def early_stopped(args: Any, state: Any, stoppers: list[Any] | None) -> str | None:
    """How the Trainer's ``EarlyStoppingCallback`` (``stoppers``: the Trainer's; None where its
    callbacks were not found) ended training, or None where it did not: its patience ran out
    (another callback that stops training is not it). Where the callbacks were not found, one
    that the Trainer's state lists counts."""
    if stoppers is None:
        listed = "EarlyStoppingCallback" in (state.stateful_callbacks or {})
        return "EarlyStoppingCallback ended training" if listed else None
    for stopper in stoppers:
        patience = stopper.early_stopping_patience
        if stopper.early_stopping_patience_counter >= patience:
            return (
                f"EarlyStoppingCallback ended training ({args.metric_for_best_model} did"
                f" not improve for {patience} evaluation{'s' if patience != 1 else ''})"
            )
    return None


def end_training(
    session: TrialSession,
    trainer: tuple[Any, Any, Any],
    stoppers: list[Any] | None,
    job_max_epochs: int,
) -> None:
    """End the run as the Trainer (``trainer``: its arguments, state and control at the end of
    training) ended it."""
    args, state, control = trainer
    if session.stopped:
        session.end()
    elif (
        control.should_training_stop
        and state.global_step < state.max_steps
        and (stopped := early_stopped(args, state, stoppers)) is not None
    ):
        # Its metric stopped improving before the job's target: the run did not converge at its
        # batch size, which counts (released, the job would run the same size again at every
        # recurrence, learning nothing).
        session.stopped_itself(stopped)
    else:  # the Trainer's own limits ended the run first
        # The Trainer's epoch (2.5 where num_train_epochs=2.5), not the run's reports (3).
        epoch = session.progress.epochs if state.epoch is None else f"{round(state.epoch, 2):g}"
        counted = f"{job_max_epochs} evaluations" if by_steps(args) else f"{job_max_epochs}"
        session.release(
            f"the Trainer stopped at epoch {epoch} (num_train_epochs="
            f"{args.num_train_epochs}, max_steps={args.max_steps}) before the server's stop (the "
            f"job's max_epochs is {counted})",
            StopReason.ENDED_EARLY,
        )
