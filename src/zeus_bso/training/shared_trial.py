"""`SharedTrial`: what the main process tells every process of the run's trial.

It crosses ranks pickled (`zeus_bso.training.collectives.from_rank_zero`), once when the run
starts and again when the memory check moves it to another size: typed, so that every rank
reads the same fields the main process wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zeus_bso.client.accumulation import Accumulation
from zeus_bso.spec import TrialId
from zeus_bso.training.server_run import ServerRun

LR_FACTOR_KEY = "lr_factor"
"""The run's learning-rate factor in a checkpoint (`TrialSession.checkpoint`; None: unscaled)."""
OLDER_CHECKPOINT = "older"
"""What a checkpoint of an earlier release, which kept no factor, reads as."""


@dataclass(frozen=True)
class PowerAnswer:
    """The server's word on the run's GPU power limits."""

    limit: float | None
    """The limit to train at (W; None: the GPUs' own, while they are profiled)."""
    profiling: bool
    """Whether the run profiles the limits in its first steps."""


@dataclass(frozen=True)
class SharedTrial:
    """The run's trial, as the main process has it."""

    job_id: str
    batch_size: int
    trial: TrialId | None
    """The server's trial (None: the run trains without the server)."""
    memory_unknown: bool
    """Whether no run of the size reported on these GPUs yet (the memory check runs)."""
    accumulation: Accumulation
    power: PowerAnswer | None
    """None: the server chooses no power limits (it was not reached, or it is upstream's)."""
    resumed: bool = False
    """Whether the trial was resumed from a checkpoint (`lr_factor` is then its factor)."""
    lr_factor: float | str | None = None
    """A resumed run's learning-rate factor: a number, None (saved unscaled: scaled now), or
    `OLDER_CHECKPOINT`."""


def saved_lr_factor(saved: Mapping[str, Any]) -> float | str | None:
    """The learning-rate factor a checkpoint keeps (see `SharedTrial.lr_factor`)."""
    factor = saved.get(LR_FACTOR_KEY, OLDER_CHECKPOINT)
    if isinstance(factor, int | float) and not isinstance(factor, bool):
        return float(factor)
    return OLDER_CHECKPOINT if factor == OLDER_CHECKPOINT else None


def shared_trial(server: ServerRun, size: int) -> SharedTrial:
    """What the main process tells every process of its trial, at ``size``."""
    link = server.link
    return SharedTrial(
        job_id=server.job_id,
        batch_size=size,
        trial=server.trial,
        memory_unknown=server.memory_unknown,
        accumulation=server.accumulation,  # of ``size``: the run's batch size
        power=(
            PowerAnswer(link.power_limit, link.power_profiling)
            if link.server_chooses_power
            else None
        ),
    )
