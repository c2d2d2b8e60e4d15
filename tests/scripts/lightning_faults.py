"""`tests.scripts.faults`'s kill as a Lightning callback, for either Lightning package (a
LightningCLI YAML file names `KillAtEpoch`)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from tests.scripts.faults import kill_at_epoch
from tests.scripts.hardware import ACCELERATOR, ON_CPU


class _KillsAtEpoch:
    def __init__(self, epoch: int, after_report: bool = False) -> None:
        super().__init__()
        self.epoch = epoch
        self.after_report = after_report

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.after_report:
            kill_at_epoch(self.epoch, trainer.current_epoch)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.after_report:  # after ZeusBSOCallback's, before ModelCheckpoint's (last)
            kill_at_epoch(self.epoch, trainer.current_epoch)


class KillAtEpoch(_KillsAtEpoch, pl.Callback):
    """SIGKILL the fit when it starts ``epoch`` (from 0): the epochs before it were reported
    and checkpointed. ``after_report``: when ``epoch`` was reported, before it is checkpointed
    (the checkpoint is an epoch behind the server)."""


def classic_kill_at_epoch(epoch: int, after_report: bool = False) -> Any:
    """`KillAtEpoch` for a ``pytorch_lightning`` Trainer."""
    import pytorch_lightning

    class ClassicKillAtEpoch(_KillsAtEpoch, pytorch_lightning.Callback):
        pass

    return ClassicKillAtEpoch(epoch, after_report)


class RestoresLate(pl.strategies.SingleDeviceStrategy):
    """A one-device strategy that loads a checkpoint after its setup, optimizers built, as FSDP,
    DeepSpeed and ModelParallel do (they need GPUs: on the CPU, this is how a test sees it)."""

    def __init__(self) -> None:
        super().__init__(device="cpu" if ON_CPU else f"{ACCELERATOR}:0")

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True
