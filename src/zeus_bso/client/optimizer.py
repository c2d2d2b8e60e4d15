"""``BatchSizeOptimizer``: what a training script (or a framework callback) talks to.

One object per training run::

    bso = BatchSizeOptimizer("http://127.0.0.1:8000", JobSpec(job_id_prefix="mnist", ...))
    batch_size = bso.get_batch_size()          # build the DataLoader with it
    bso.on_train_begin()
    for epoch in ...:
        train(); metric = validate()
        if bso.on_evaluate(metric).stop_train:  # reports cumulative time and energy
            break
    bso.end()                                    # also at exit, or use it as a context manager

The job id: when the spec has none, it is ``<prefix>-<8 hex>`` from a hash of the whole job
configuration (GPU model, count and power included), so every recurrence of the same job finds
the same history without copying ids around; change any setting and it is a new job.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from zeus_bso.client.http import ServerClient
from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import (
    OperationOrderError,
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.spec import (
    GPU_FIELDS,
    CreatedJob,
    GpuConfig,
    JobSpec,
    JobSpecFromClient,
    ReportResponse,
    TrainingResult,
    TrialId,
    gpu_of,
    policy_options,
)

logger = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_SECONDS = 60.0


RUN_KEY_VARIABLE = "ZEUS_BSO_RUN_KEY"


def run_key_from_environment() -> str | None:
    """This run's name from the environment: ``ZEUS_BSO_RUN_KEY``, else torchrun's run id
    (``TORCHELASTIC_RUN_ID``, the same across the elastic restarts of one launch; its default
    ``none`` is not a name). None without either."""
    explicit = os.environ.get(RUN_KEY_VARIABLE)
    if explicit:
        return explicit
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}"
    return None


_HASHED_ONLY_OFF_DEFAULT = {
    name: JobSpec.model_fields[name].default
    for name, option in policy_options().items()
    if option.hashed_off_default
}
"""Options added after ids were first hashed, with their defaults (`PolicyOption`): a job id
hashes them only away from their default, so a job's id stays what it was before the option
existed."""


def stable_job_id(spec: JobSpecFromClient) -> str:
    """The id of a job without one: its prefix and a hash of its configuration but its GPUs (a
    job on other GPUs is the same job on another hardware profile)."""
    config = spec.model_dump(mode="json", exclude={"job_id", *GPU_FIELDS})
    for name, default in _HASHED_ONLY_OFF_DEFAULT.items():
        if config.get(name) == default:
            del config[name]  # ids from before the option existed stay the same
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return f"{spec.job_id_prefix}-{digest[:8]}"


class BatchSizeOptimizer:
    """Gets this run's batch size from the server and reports its progress after every epoch.

    One process of a run talks to the server (in a distributed run, global rank 0:
    `zeus_bso.training.TrialSession` gives every rank its answers).
    """

    def __init__(
        self,
        server_url: str,
        job: JobSpec,
        energy_meter: EnergyMeter | None = None,
        token: str | None = None,
        *,
        heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
        retry_seconds: float = 30.0,
        run_key: str | None = None,
        gpus: GpuConfig | None = None,
    ) -> None:
        self.run_key = run_key if run_key is not None else run_key_from_environment()
        """This run's name, the same across its restarts (see `run_key_from_environment`)."""
        self.meter = energy_meter if energy_meter is not None else auto_meter()
        if gpus is None:
            gpus = GpuConfig(
                max_power=self.meter.max_power,
                number_of_gpus=self.meter.device_count,
                gpu_model=self.meter.device_model,
            )
        spec = JobSpecFromClient(
            **job.model_dump(exclude={"job_id"}), job_id=job.job_id, **gpus.model_dump()
        )
        if spec.job_id is None:
            spec = spec.model_copy(update={"job_id": stable_job_id(spec)})
        self.gpu = gpu_of(spec)
        """The GPUs this run trains on (its hardware profile), sent with the batch size request
        so that runs of one job on different hardware at once are told apart."""
        self.client = ServerClient(server_url, token=token, retry_seconds=retry_seconds)
        self.job: CreatedJob
        self.job, created = self.client.register_job(spec)  # unreachable: a clear error now
        logger.info("job %s %s", self.job.job_id, "registered" if created else "found")
        self.progress = TrialProgress(self.meter)
        self.training_finished = False
        self.converged = False
        self._pending: TrainingResult | None = None
        self._heartbeat_seconds = heartbeat_seconds
        self._stop_heartbeat = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._ended = False
        atexit.register(self.abort)

    @property
    def trial(self) -> TrialId | None:
        """This run's trial (after `get_batch_size` or `resume`)."""
        return self.progress.trial

    @property
    def current_epoch(self) -> int:
        """Epochs reported so far in this trial (a resumed run's included)."""
        return self.progress.epochs

    @property
    def batch_size(self) -> int | None:
        """The batch size of this run (after `get_batch_size`)."""
        return self.trial.batch_size if self.trial else None

    @property
    def trial_number(self) -> int | None:
        """The trial number of this run (after `get_batch_size`)."""
        return self.trial.trial_number if self.trial else None

    def get_batch_size(self) -> int:
        """Ask the server for this run's batch size (once per run)."""
        trial = self.progress.trial
        if trial is None:
            dispatched = self.client.dispatch(self.job.job_id, self.gpu, self.run_key)
            trial = dispatched.trial
            if dispatched.resumed:
                # A restart of this run: its trial goes on from what it reported.
                self.progress.go_on(
                    trial, dispatched.current_epoch, dispatched.time, dispatched.energy
                )
                logger.info(
                    "run %r continues trial %d of job %s after epoch %d: batch size %d",
                    self.run_key,
                    trial.trial_number,
                    self.job.job_id,
                    dispatched.current_epoch,
                    trial.batch_size,
                )
            else:
                self.progress.trial = trial
                logger.info(
                    "trial %d of job %s: batch size %d",
                    trial.trial_number,
                    self.job.job_id,
                    trial.batch_size,
                )
        return trial.batch_size

    def checkpoint(self) -> dict[str, Any]:
        """What a checkpoint keeps so that a restarted run continues this trial (`resume`)."""
        return self.progress.checkpoint()

    def resume(self, saved: Mapping[str, Any]) -> int:
        """Continue the trial of a `checkpoint` after a restart (instead of `get_batch_size`).
        Returns its batch size.

        Raises:
            ConfigurationError: ``saved`` is not a checkpoint of a trial.
        """
        trial = self.progress.resume(saved)
        logger.info("trial %d of job %s resumed", trial.trial_number, self.job.job_id)
        return trial.batch_size

    def on_train_begin(self) -> None:
        """Start measuring time and energy, and keep the trial's lease alive."""
        if self.trial is None:
            raise OperationOrderError("call get_batch_size() before on_train_begin()")
        self.progress.begin()
        if self._heartbeat is None and self._heartbeat_seconds > 0:
            self._heartbeat = threading.Thread(
                target=self._beat, daemon=True, name="zeus-bso-heartbeat"
            )
            self._heartbeat.start()

    def elapsed(self) -> Elapsed:
        """Seconds and joules (this process's meter) since training began."""
        return self.progress.elapsed()

    def on_evaluate(
        self, metric: float, epoch: int | None = None, elapsed: Elapsed | None = None
    ) -> ReportResponse:
        """Report the validation metric of the epoch just finished; says whether to stop.

        ``epoch`` (from 1) is the run's epoch count, for a loop that validates every few epochs
        (default: one more than reported). ``elapsed``: the run's seconds and joules since
        training began, for a distributed run that adds up every rank's devices
        (`zeus_bso.training.collectives.elapsed_of_the_run`); by default this process's clock
        and meter, read once here.
        If the server cannot be reached, training goes on (a warning is logged) and the report
        is sent again at `end`.
        """
        if self.trial is None:
            raise OperationOrderError("call get_batch_size() and on_train_begin() first")
        if self.training_finished:
            return ReportResponse(
                stop_train=True, converged=self.converged, message="training already finished"
            )
        epoch = self.progress.epoch_done(epoch)
        if elapsed is None:
            elapsed = self.progress.elapsed()
        self.progress.reported(elapsed.joules)
        result = TrainingResult(
            **self.trial.model_dump(),
            time=elapsed.seconds,
            energy=elapsed.joules,
            metric=metric,
            current_epoch=epoch,
        )
        try:
            answer = self.client.report(result)
        except ServerConnectionError as err:
            self._pending = result
            logger.warning(
                "report of epoch %d not delivered, will retry: %s", result.current_epoch, err
            )
            return ReportResponse(stop_train=False, converged=False, message=str(err))
        self._pending = None
        if answer.stop_train:
            self.training_finished = True
            self.converged = answer.converged
            logger.info("trial %d done: %s", self.trial.trial_number, answer.message)
        return answer

    def _beat(self) -> None:
        warned = False
        while not self._stop_heartbeat.wait(self._heartbeat_seconds):
            if self.trial is None or self.training_finished:
                continue
            try:
                self.client.heartbeat(self.trial)
            except RouteMissingError:
                logger.info(
                    "the server at %s has no heartbeat route (upstream Zeus?): no heartbeats; "
                    "its trials have no leases to keep",
                    self.client.server_url,
                )
                return
            except (ServerConnectionError, ServerRejectedError) as err:
                if not warned:
                    logger.warning("heartbeat failed (training goes on): %s", err)
                    warned = True

    def end(self, *, end_trial: bool = True) -> None:
        """End the trial: deliver an undelivered report, then tell the server the run is over.

        ``end_trial=False`` leaves the trial to its lease instead (it becomes abandoned, which
        says nothing bad about its batch size): for a run that never trained, e.g. because the
        script was misconfigured.
        """
        if self._ended:
            return
        self._ended = True
        atexit.unregister(self.abort)  # ended: the exit hook need not keep this object alive
        self._stop_heartbeat.set()
        try:
            if self.trial is not None and end_trial:
                if self._pending is not None:
                    try:
                        self.client.report(self._pending)
                    except ZeusBSOError as err:
                        logger.error(
                            "the last report could not be delivered and is lost: %s (%s)",
                            self._pending.model_dump_json(),
                            err,
                        )
                self.client.end_trial(self.trial)
        except ZeusBSOError as err:
            logger.warning("could not end trial %s: %s", self.trial, err)
        finally:
            self.meter.close()
            self.client.close()

    def abort(self) -> None:
        """End a run that is failing (an exception, or an exit without `end`).

        Without a run key the trial ends (failed, unless its final report came). With one it is
        left open for the run's restart, which continues it; if no restart comes, its lease
        runs out and it is abandoned.
        """
        self.end(end_trial=self.run_key is None or self.training_finished)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.end()
        else:
            self.abort()
