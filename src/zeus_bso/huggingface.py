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

The server's cost of each report and the run's energy go into the evaluation metrics
(``eval_...`` keys' neighbours ``bso_cost`` and ``bso_energy_j``) before the Trainer hands them to
its reporting integrations (``report_to``: W&B, MLflow, TensorBoard, ...), into what
``Trainer.evaluate`` returns, and into ``state.log_history`` (``trainer_state.json``).
``auto_find_batch_size=True`` is refused: it would change the batch size under the trial. The
bookkeeping (trial, epochs, time and energy, checkpoint) is `zeus_bso.progress`'s; this module
maps the Trainer's events onto it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from pathlib import Path
from typing import Any

from typing_extensions import override

from zeus_bso.client import BatchSizeOptimizer
from zeus_bso.distributed import (
    broadcast_object,
    energy_of_the_run,
    gpus_of_the_run,
    open_window,
    torch_distributed,
)
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import ZeusBSOError
from zeus_bso.progress import TrialProgress
from zeus_bso.ranks import from_rank_zero
from zeus_bso.spec import GpuConfig, JobSpec, TrialId

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'zeus-bso[hf]'"
STATE_FILE = "zeus_bso_trial.json"

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as err:
    raise ImportError(f"ZeusBSOTrainerCallback needs transformers: {INSTALL_HINT}") from err


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
        self._gpus: GpuConfig | None = None
        self._reported_step: int | None = None

    @property
    def batch_size(self) -> int:
        """This run's per-device batch size; the first access asks the server."""
        if self.progress is None:
            if self.rank != 0 and torch_distributed() is None:
                raise ZeusBSOError(
                    "rank != 0 gets the batch size from rank 0: initialise torch.distributed "
                    "(e.g. accelerate.PartialState()) before reading callback.batch_size"
                )
            if self._meter is None:
                self._meter = auto_meter()
            # Every rank's GPUs, each once: the job's GPU count and power are the whole run's.
            self._gpus = gpus_of_the_run(self._meter)
            shared = from_rank_zero(broadcast_object, self.rank == 0, self._trial_of_this_run)
            if self.optimizer is not None:
                self.progress = self.optimizer.progress
            else:
                self.progress = TrialProgress(self._meter)
                self.progress.trial = TrialId.model_validate(shared)
        assert self.progress.trial is not None
        return self.progress.trial.batch_size

    def _trial_of_this_run(self) -> dict[str, Any]:
        optimizer = self.optimizer = BatchSizeOptimizer(
            self.server_url, self.job, energy_meter=self._meter, token=self.token, gpus=self._gpus
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

    def _run_first(self) -> None:
        """Move this callback to the front of its Trainer's callbacks.

        The Trainer puts the reporting integrations (W&B, MLflow, TensorBoard, ...) before the
        callbacks it is given, and hands an evaluation's metrics to every callback's ``on_log``
        before ``on_evaluate``. Run first, this callback adds the cost to those metrics before
        the integrations log them. The list is the ``CallbackHandler``'s that holds this
        callback (callbacks are not handed the Trainer); moving it within the list the Trainer
        is walking calls every other callback once still.
        """
        for holder in gc.get_referrers(self):
            if (
                isinstance(holder, list)
                and holder
                and holder[0] is not self
                and all(isinstance(item, TrainerCallback) for item in holder)
                and any(
                    getattr(owner, "callbacks", None) is holder
                    for owner in gc.get_referrers(holder)
                )
            ):
                holder.remove(self)
                holder.insert(0, self)

    @override
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self._run_first()

    @override
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self._run_first()  # also when added after the Trainer was built (add_callback)
        if args.auto_find_batch_size:
            if self.optimizer is not None:
                self.optimizer.end(end_trial=False)  # not this batch size's fault
            raise ZeusBSOError(
                "TrainingArguments(auto_find_batch_size=True) would shrink the batch size the "
                "optimizer chose while the trial records it; leave it False: a batch size that "
                "does not fit is the optimizer's to learn (its run fails and is reported so)"
            )
        if args.per_device_train_batch_size != self.batch_size:
            if self.optimizer is not None:
                self.optimizer.end(end_trial=False)  # not this batch size's fault
            raise ZeusBSOError(
                f"TrainingArguments.per_device_train_batch_size is "
                f"{args.per_device_train_batch_size} but the optimizer chose {self.batch_size}: "
                "build TrainingArguments with per_device_train_batch_size=callback.batch_size"
            )
        strategy = str(getattr(args.eval_strategy, "value", args.eval_strategy))
        if strategy == "steps" and state.is_world_process_zero:
            logger.warning(
                "eval_strategy='steps': every evaluation (every %s steps) is reported as an epoch, "
                "so the job's max_epochs (%d) counts evaluations, and its learning curves and "
                "costs are per evaluation; evaluate once an epoch (eval_strategy='epoch') for "
                "epochs",
                args.eval_steps,
                self.job.max_epochs,
            )
        self._training = True
        if self.progress is not None:
            open_window(self.progress)  # on every rank at once
        if self.optimizer is not None:
            self.optimizer.on_train_begin()  # starts the heartbeat

    @override
    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        # An evaluation's metrics reach on_log before on_evaluate; this callback runs first
        # (_run_first), so the cost it adds reaches every integration after it.
        if not self._training or self.progress is None or not logs or self.metric not in logs:
            return
        self._report(state, control, logs)

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
        if self._reported_step == state.global_step:
            return  # reported from its logs
        metrics = metrics if metrics is not None else {}
        self._report(state, control, metrics)  # raises, on every rank, if the metric is missing

    def _report(
        self, state: TrainerState, control: TrainerControl, metrics: dict[str, float]
    ) -> None:
        assert self.progress is not None
        self._reported_step = state.global_step
        # Every rank's readings, each GPU once (ranks of one node may all see every GPU).
        energy = energy_of_the_run(self.progress)

        def report() -> tuple[bool, float | None]:
            assert self.optimizer is not None
            if self.metric not in metrics:
                raise ZeusBSOError(
                    f"metric '{self.metric}' is not among the evaluation metrics "
                    f"{sorted(metrics)}; pass metric=... (with its 'eval_' prefix)"
                )
            answer = self.optimizer.on_evaluate(float(metrics[self.metric]), energy=energy)
            return answer.stop_train, answer.cost

        stop, cost = from_rank_zero(broadcast_object, state.is_world_process_zero, report)
        if cost is not None:  # the server's figure (none while it is unreachable)
            metrics["bso_cost"] = cost
            metrics["bso_energy_j"] = energy
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
