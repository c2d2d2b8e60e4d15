"""`SessionOptions`: what a loop adapter passes on to `zeus_bso.training.TrialSession`
unchanged, each option as the session takes it."""

from __future__ import annotations

from typing import Literal, TypedDict

from zeus_bso.energy import EnergyMeter
from zeus_bso.power.run import PowerLimitMode
from zeus_bso.scaling.lr import LrRule
from zeus_bso.training.trial_file import Resume


class SessionOptions(TypedDict, total=False):
    """The options of a run that adapters pass on to the session."""

    energy_meter: EnergyMeter | None
    """How to measure energy in this process (default: `zeus_bso.energy.auto_meter`)."""
    token: str | None
    """The server's bearer token, if it has one."""
    resume: Resume
    """What the session's ``checkpoint`` returned in an earlier, interrupted run of this trial,
    a function that reads it (called on the main process only), or the checkpoint directory
    where zeus-bso wrote it (`zeus_bso.training.trial_file.STATE_FILE`)."""
    on_server_unavailable: Literal["fallback", "raise"]
    """``"fallback"`` (train at the default batch size, or the last recommendation saved on
    this machine, when the server cannot be reached at start) or ``"raise"`` (raise
    `zeus_bso.errors.ServerConnectionError`)."""
    raise_if_unconverged: bool
    """`zeus_bso.errors.ZeusBSOTrainFailError` is raised on every process, once, when the run
    ends without reaching its target: from the report whose answer ends it, as upstream Zeus's
    ``on_evaluate`` does (for a framework whose callback does not raise at the end of the fit
    instead), or from the session's ``end``."""
    lr_rule: LrRule
    """How the learning rate follows the batch size (`zeus_bso.scaling.LrRule`), for the
    session's ``learning_rate`` and ``scale``."""
    reference_batch_size: int | None
    """The batch size the learning rate was tuned at (default: the job's
    ``default_batch_size``)."""
    max_micro_batch_size: int | None
    """Opts into gradient accumulation (see `zeus_bso.client.accumulation`): a batch size
    above it, or at or above the smallest that ran out of memory on these GPUs, is trained as
    ``accumulation_steps`` micro-batches of ``micro_batch_size`` on every process."""
    power_limit: PowerLimitMode
    """``"optimize"`` opts into GPU power limits (`zeus_bso.training.power`): a batch size's
    first run on these GPUs profiles the limits in its first steps (call the session's
    ``step_begin`` and ``step_end`` around every training step), and runs train at the limit
    the server chooses; each GPU's own limit is restored on every exit path. ``"off"``, the
    default: the limits are left alone."""
