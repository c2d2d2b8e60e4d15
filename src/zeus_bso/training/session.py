"""`TrialSession`: one run's trial on every process of a training loop, whatever the framework.

It holds what the training side guarantees: the main process (global rank 0) alone talks to the
server, and every process gets its answers (the batch size, whether to stop) or its error; each
physical GPU's energy is measured once over every process and node (`collectives`); a
failing run leaves its trial to be ended as failed, or, with a run key, open for its restart; a
run resumes its trial from what `TrialSession.checkpoint` saved. A framework adapter gives it
whether this process is the main one and how the framework logs; the modules of
`zeus_bso.integrations` are such adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

from zeus_bso.client import BatchSizeOptimizer
from zeus_bso.client.progress import TrialProgress
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import OperationOrderError
from zeus_bso.spec import JobSpec, TrialId
from zeus_bso.training.collectives import (
    broadcast_object,
    elapsed_of_the_run,
    from_rank_zero,
    gpus_of_the_run,
    open_window,
)


class TrialSession:
    """One run's trial on every process of a training loop: the batch size, the reports, the
    stop, each GPU's energy once, and the framework's logging.

    Args:
        is_main: whether this is the process that talks to the server (global rank 0).
        log: how the framework logs values at a step (its trackers), on every process.
        server_url: the zeus-bso server.
        job: the recurring job (its ``job_id`` may be left out: see `BatchSizeOptimizer`).
        energy_meter: how to measure energy in this process (default: `auto_meter`).
        token: the server's bearer token, if it has one.
        resume: what `checkpoint` returned in an earlier, interrupted run of this trial, or a
            function that reads it (called on the main process only).
        broadcast: sends a picklable object from the main process to every process and returns
            it there (default: `zeus_bso.training.collectives.broadcast_object`).
    """

    def __init__(
        self,
        is_main: bool,
        log: Callable[[dict[str, float], int], None],
        server_url: str,
        job: JobSpec,
        energy_meter: EnergyMeter | None = None,
        token: str | None = None,
        resume: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        broadcast: Callable[[Any], Any] = broadcast_object,
    ) -> None:
        self.is_main = is_main
        self._log = log
        self._broadcast = broadcast
        self.last: dict[str, float] = {}
        """What the latest report logged: ``bso/batch_size``, ``bso/energy_j`` and, when the
        server answered, ``bso/cost``."""
        self.meter = energy_meter if energy_meter is not None else auto_meter()
        self.optimizer: BatchSizeOptimizer | None = None
        """The main process's link to the server."""
        # Every process's GPUs, each once: the job's GPU count and power are the whole run's.
        gpus = gpus_of_the_run(self.meter)

        def trial_of_this_run() -> dict[str, Any]:
            optimizer = self.optimizer = BatchSizeOptimizer(
                server_url, job, energy_meter=self.meter, token=token, gpus=gpus
            )
            saved = resume() if callable(resume) else resume
            if saved:
                optimizer.resume(saved)
            else:
                optimizer.get_batch_size()
            assert optimizer.trial is not None
            return optimizer.trial.model_dump()

        self.trial = TrialId.model_validate(from_rank_zero(broadcast, is_main, trial_of_this_run))
        self.progress: TrialProgress
        """This process's trial, epochs, time and energy."""
        if self.optimizer is not None:
            self.progress = self.optimizer.progress
        else:
            self.progress = TrialProgress(self.meter)
            self.progress.trial = self.trial
        self._began = False

    @property
    def batch_size(self) -> int:
        """The batch size of this run, per process (what each process's DataLoader takes)."""
        return self.trial.batch_size

    @property
    def trial_number(self) -> int:
        """The server's number of this run's trial."""
        return self.trial.trial_number

    @property
    def job_id(self) -> str:
        """The job this run is a recurrence of."""
        return self.trial.job_id

    def train_begin(self) -> None:
        """Training starts now: open the measuring window on every process at once."""
        open_window(self.progress)
        if self.optimizer is not None:
            self.optimizer.on_train_begin()  # starts the heartbeat
        self._began = True

    def report(self, metric: float | Callable[[], float], epoch: int | None = None) -> bool:
        """Report the validation metric of the epoch just finished; True: stop training.

        The main process's metric is reported: compute it over the whole validation set (e.g.
        gathered from every process by the framework). A function is called on the main process
        only; its error, like the server's, is raised on every process. ``epoch`` (from 1): the
        run's epochs so far, for a loop that validates every few epochs (default: one more than
        reported)."""
        if not self._began:
            raise OperationOrderError("call train_begin() before report()")
        elapsed = elapsed_of_the_run(self.progress)

        def send() -> tuple[bool, float | None, int]:
            assert self.optimizer is not None
            value = metric() if callable(metric) else metric
            answer = self.optimizer.on_evaluate(float(value), epoch=epoch, elapsed=elapsed)
            return answer.stop_train, answer.cost, self.optimizer.current_epoch

        stop, cost, epoch = from_rank_zero(self._broadcast, self.is_main, send)
        values: dict[str, float] = {
            "bso/batch_size": float(self.batch_size),
            "bso/energy_j": elapsed.joules,
        }
        if cost is not None:  # the server's figure (none while it is unreachable)
            values["bso/cost"] = cost
        self.last = values
        self._log(values, epoch)
        return bool(stop)

    def checkpoint(self) -> dict[str, Any]:
        """What to save with a checkpoint to continue this trial after a restart (main process;
        {} elsewhere). Pass it back as ``resume=``."""
        return self.optimizer.checkpoint() if self.optimizer is not None else {}

    def end(self, *, end_trial: bool = True) -> None:
        """The run is over: deliver what is pending and end the trial (main process; with
        ``end_trial=False`` the trial stays open, for a failure that is not its batch size's)."""
        if self.optimizer is not None:
            self.optimizer.end(end_trial=end_trial)
        self.meter.close()

    def abort(self) -> None:
        """The run failed: its trial ends as failed, or, with a run key, stays open for the
        restart (main process)."""
        if self.optimizer is not None:
            self.optimizer.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.end()
        else:
            self.abort()
