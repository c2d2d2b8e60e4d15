"""``ZeusBSOTrainerCallback`` for the Hugging Face ``Trainer``.

The Trainer builds its DataLoader from ``TrainingArguments`` before any callback runs, so the
batch size is chosen first, through the callback::

    callback = ZeusBSOTrainerCallback(server_url=..., job=JobSpec(...), metric="eval_accuracy")
    args = TrainingArguments(..., per_device_train_batch_size=callback.batch_size,
                             eval_strategy="epoch")
    Trainer(model, args, ..., callbacks=[callback]).train()

Only the world process zero talks to the server; with ``torch.distributed`` initialised the
batch size and the stop decision are broadcast and the energy of all ranks is added up.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from zeus_bso.client import BatchSizeOptimizer
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import JobSpec

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'zeus-bso[hf]'"

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as err:
    raise ImportError(f"ZeusBSOTrainerCallback needs transformers: {INSTALL_HINT}") from err


def _distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _broadcast(value: Any) -> Any:
    dist = _distributed()
    if dist is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class ZeusBSOTrainerCallback(TrainerCallback):
    """Chooses the batch size of a Hugging Face training run and stops it when told.

    Args:
        server_url: the zeus-bso server.
        job: the recurring job (its ``job_id`` may be left out: see `BatchSizeOptimizer`).
        metric: the evaluation metric to report (a key of the Trainer's metrics, with its
            ``eval_`` prefix).
        energy_meter: how to measure energy in this process (default: `auto_meter`).
        token: the server's bearer token, if it has one.
    """

    def __init__(
        self,
        server_url: str,
        job: JobSpec,
        metric: str = "eval_accuracy",
        energy_meter: EnergyMeter | None = None,
        token: str | None = None,
    ) -> None:
        self.server_url = server_url
        self.job = job
        self.metric = metric
        self.token = token
        self._meter = energy_meter
        self.rank = int(os.environ.get("RANK", "0"))
        self.optimizer: BatchSizeOptimizer | None = None
        self._batch_size: int | None = None
        self._energy_start = 0.0

    @property
    def batch_size(self) -> int:
        """This run's per-device batch size; the first access asks the server."""
        if self._batch_size is None:
            if self.rank == 0:
                self.optimizer = BatchSizeOptimizer(
                    self.server_url, self.job, energy_meter=self._meter, token=self.token
                )
                self._meter = self.optimizer.meter
                value: int | None = self.optimizer.get_batch_size()
            elif _distributed() is None:
                raise ZeusBSOError(
                    "rank != 0 gets the batch size from rank 0: initialise torch.distributed "
                    "(e.g. accelerate.PartialState()) before reading callback.batch_size"
                )
            else:
                value = None
            self._batch_size = int(_broadcast(value))
        return self._batch_size

    @property
    def trial_number(self) -> int | None:
        """The server's trial number for this run (world process zero)."""
        return self.optimizer.trial_number if self.optimizer else None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if args.per_device_train_batch_size != self.batch_size:
            raise ZeusBSOError(
                f"TrainingArguments.per_device_train_batch_size is "
                f"{args.per_device_train_batch_size} but the optimizer chose {self.batch_size}: "
                "build TrainingArguments with per_device_train_batch_size=callback.batch_size"
            )
        if self._meter is None:
            self._meter = auto_meter()
        self._energy_start = self._meter.energy()
        if self.optimizer is not None and state.is_world_process_zero:
            self.optimizer.on_train_begin()

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        if self._meter is None:
            return  # an evaluation outside of training
        energy = self._meter.energy() - self._energy_start
        dist = _distributed()
        if dist is not None:
            import torch

            total = torch.tensor(energy, dtype=torch.float64)
            dist.all_reduce(total)
            energy = float(total)
        stop = False
        if state.is_world_process_zero and self.optimizer is not None:
            metrics = metrics or {}
            if self.metric not in metrics:
                raise ZeusBSOError(
                    f"metric '{self.metric}' is not among the evaluation metrics "
                    f"{sorted(metrics)}; pass metric=... (with its 'eval_' prefix)"
                )
            stop = self.optimizer.on_evaluate(float(metrics[self.metric]), energy=energy).stop_train
        if bool(_broadcast(stop)):
            control.should_training_stop = True

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.optimizer is not None:
            self.optimizer.end()
