"""``ZeusBSOTrainerCallback`` for the Hugging Face ``Trainer``.

The Trainer builds its DataLoader from ``TrainingArguments`` before any callback runs, so the
batch size is chosen first, through the callback::

    callback = ZeusBSOTrainerCallback(server_url=..., job=JobSpec(...), metric="eval_accuracy")
    args = TrainingArguments(..., per_device_train_batch_size=callback.batch_size,
                             eval_strategy="epoch")
    Trainer(model, args, ..., callbacks=[callback]).train()

Only the world process zero talks to the server; with ``torch.distributed`` initialised the
batch size and the stop decision are broadcast and the energy of all ranks is added up.

Resuming: every checkpoint gets a ``zeus_bso_trial.json``; pass the checkpoint to the callback
(``resume_from_checkpoint=...``, as to ``Trainer.train``) and the run continues its trial.

The server's cost of each report goes into the evaluation metrics (``bso_cost``, which
``Trainer.evaluate`` returns) and into ``state.log_history`` (``trainer_state.json``). The
bookkeeping (trial, epochs, time and energy, checkpoint) is `zeus_bso.progress`'s; this module
maps the Trainer's events onto it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from typing_extensions import override

from zeus_bso.client import BatchSizeOptimizer
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import ZeusBSOError
from zeus_bso.progress import TrialProgress
from zeus_bso.ranks import from_rank_zero
from zeus_bso.spec import JobSpec, TrialId

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'zeus-bso[hf]'"
STATE_FILE = "zeus_bso_trial.json"

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
        resume_from_checkpoint: a checkpoint directory of an earlier, interrupted run of this
            trial: the run continues that trial (and its batch size).
    """

    def __init__(
        self,
        server_url: str,
        job: JobSpec,
        metric: str = "eval_accuracy",
        energy_meter: EnergyMeter | None = None,
        token: str | None = None,
        resume_from_checkpoint: str | os.PathLike[str] | None = None,
    ) -> None:
        self.server_url = server_url
        self.resume_from = Path(resume_from_checkpoint) if resume_from_checkpoint else None
        self.job = job
        self.metric = metric
        self.token = token
        self._meter = energy_meter
        self.rank = int(os.environ.get("RANK", "0"))
        self.optimizer: BatchSizeOptimizer | None = None
        """The world process zero's link to the server."""
        self.progress: TrialProgress | None = None
        """This process's trial, epochs, time and energy (from the first `batch_size` on)."""
        self._training = False

    @property
    def batch_size(self) -> int:
        """This run's per-device batch size; the first access asks the server."""
        if self.progress is None:
            if self.rank != 0 and _distributed() is None:
                raise ZeusBSOError(
                    "rank != 0 gets the batch size from rank 0: initialise torch.distributed "
                    "(e.g. accelerate.PartialState()) before reading callback.batch_size"
                )
            shared = from_rank_zero(_broadcast, self.rank == 0, self._trial_of_this_run)
            if self.optimizer is not None:
                self.progress = self.optimizer.progress
            else:
                self.progress = TrialProgress(self._meter or auto_meter())
                self.progress.trial = TrialId.model_validate(shared)
        assert self.progress.trial is not None
        return self.progress.trial.batch_size

    def _trial_of_this_run(self) -> dict[str, Any]:
        optimizer = self.optimizer = BatchSizeOptimizer(
            self.server_url, self.job, energy_meter=self._meter, token=self.token
        )
        if self.resume_from is None:
            optimizer.get_batch_size()
        else:
            path = self.resume_from / STATE_FILE
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError) as err:
                raise ZeusBSOError(
                    f"cannot resume from {self.resume_from}: no readable {STATE_FILE} ({err}); "
                    "it is written into every checkpoint a run with this callback saves"
                ) from err
            optimizer.resume(saved)
        assert optimizer.trial is not None
        return optimizer.trial.model_dump()

    @property
    def trial_number(self) -> int | None:
        """The server's trial number for this run (world process zero)."""
        return self.optimizer.trial_number if self.optimizer else None

    @override
    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.optimizer is None or not state.is_world_process_zero:
            return
        checkpoint = Path(args.output_dir or ".") / f"checkpoint-{state.global_step}"
        saved = self.optimizer.checkpoint()
        if saved and checkpoint.is_dir():
            (checkpoint / STATE_FILE).write_text(json.dumps(saved))

    @override
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if args.per_device_train_batch_size != self.batch_size:
            if self.optimizer is not None:
                self.optimizer.end(end_trial=False)  # not this batch size's fault
            raise ZeusBSOError(
                f"TrainingArguments.per_device_train_batch_size is "
                f"{args.per_device_train_batch_size} but the optimizer chose {self.batch_size}: "
                "build TrainingArguments with per_device_train_batch_size=callback.batch_size"
            )
        self._training = True
        if self.optimizer is not None:
            self.optimizer.on_train_begin()  # opens the window and starts the heartbeat
        elif self.progress is not None:
            self.progress.begin()

    @override
    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        if not self._training or self.progress is None:
            return  # an evaluation outside of training
        energy = self.progress.energy()
        dist = _distributed()
        if dist is not None:
            import torch

            total = torch.tensor(energy, dtype=torch.float64)
            dist.all_reduce(total)
            energy = float(total)
        metrics = metrics if metrics is not None else {}

        def report() -> tuple[bool, float | None]:
            assert self.optimizer is not None
            if self.metric not in metrics:
                raise ZeusBSOError(
                    f"metric '{self.metric}' is not among the evaluation metrics "
                    f"{sorted(metrics)}; pass metric=... (with its 'eval_' prefix)"
                )
            answer = self.optimizer.on_evaluate(float(metrics[self.metric]), energy=energy)
            return answer.stop_train, answer.cost

        stop, cost = from_rank_zero(_broadcast, state.is_world_process_zero, report)
        if cost is not None:  # the server's figure (none while it is unreachable)
            metrics["bso_cost"] = cost
            if state.is_world_process_zero:
                state.log_history.append(
                    {
                        "bso/cost": cost,
                        "bso/energy_j": energy,
                        "bso/batch_size": self.batch_size,
                        "epoch": state.epoch,
                        "step": state.global_step,
                    }
                )
        if stop:
            control.should_training_stop = True

    @override
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self._training = False
        if self.optimizer is not None:
            self.optimizer.end()
