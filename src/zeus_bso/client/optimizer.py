"""``BatchSizeOptimizer``: what a training script (or a framework callback) talks to.

One object per training run::

    bso = BatchSizeOptimizer("http://127.0.0.1:8000", JobSpec(job_id_prefix="mnist", ...))
    batch_size = bso.get_batch_size()          # registers the job; build the DataLoader with it
    bso.on_train_begin()
    for epoch in ...:
        train(); metric = validate()
        if bso.on_evaluate(metric).stop_train:  # reports cumulative time and energy
            break
    bso.end()                                    # also at exit, or use it as a context manager
    bso.outcome                                  # how the run ended; a line says it on stderr

Nothing talks to the server before `get_batch_size` (or `resume`). When the server cannot be
reached there, the run trains at the job's default batch size (or the last recommendation
this machine saw for the job), with a warning, unless ``on_server_unavailable="raise"``.

The job id: when the spec has none, it is ``<prefix>-<8 hex>`` from a hash of the job's settings
(not its GPUs: on others it is the same job on another hardware profile), so every recurrence of
the same job finds the same history without copying ids around; change any setting and it is a
new job, which learns from scratch: the run says so, naming the settings that changed
(`zeus_bso.client.new_job`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

from zeus_bso.client import failure
from zeus_bso.client.accumulation import Accumulation, plan
from zeus_bso.client.batches import check_first_batch
from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.http import ServerClient
from zeus_bso.client.memory import (
    free_accelerator_memory,
    out_of_memory,
    out_of_memory_words,
    smallest_to_try,
)
from zeus_bso.client.outcome import MUST_DELIVER, RunOutcome, show_on_stderr
from zeus_bso.client.power import records_folder, restore_left_over
from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.client.sigterm import SigtermGuard
from zeus_bso.energy import EnergyMeter, auto_meter
from zeus_bso.errors import (
    ConfigurationError,
    OperationOrderError,
    OutOfMemoryNotTheBatchSizeError,
    PowerLimitError,
    ZeusBSOTrainFailError,
)
from zeus_bso.options import (
    JobLike,
    check_max_micro_batch_size,
    heartbeat_seconds_from,
    job_lr_rule,
    required_job,
    server_url_from,
    token_from,
)
from zeus_bso.policy.cost import Report, StopRules, judge_report
from zeus_bso.policy.machine import answer_of
from zeus_bso.power import GpuPowerLimits
from zeus_bso.power.run import PowerLimitMode, PowerLimitRun, check_power_limit
from zeus_bso.scaling.lr import LrRule, LrScaling
from zeus_bso.spec import (
    GPU_FIELDS,
    POWER_SETTINGS,
    CreatedJob,
    GpuConfig,
    JobSpec,
    JobSpecFromClient,
    PowerMeasurement,
    ReportResponse,
    StopReason,
    TrainingResult,
    TrialId,
    policy_options,
)

logger = logging.getLogger(__name__)

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
_HASHED_ONLY_OFF_DEFAULT.update(  # job fields too
    batch_size_range=None, batch_size_steps="pow2", lr_rule=None
)


_OPEN_RUNS: weakref.WeakSet[BatchSizeOptimizer] = weakref.WeakSet()
"""This process's runs whose trial is open: from their dispatch (or resume) to their end."""


def stable_job_id(spec: JobSpecFromClient) -> str:
    """The id of a job without one: its prefix and a hash of its configuration but its GPUs and
    its power settings (a job on other GPUs is the same job on another hardware profile, and a
    job whose runs train at other power limits the same job)."""
    config = spec.model_dump(mode="json", exclude={"job_id", *GPU_FIELDS, *POWER_SETTINGS})
    for name, default in _HASHED_ONLY_OFF_DEFAULT.items():
        if name in config and config[name] == default:
            del config[name]  # ids from before the option existed stay the same
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return f"{spec.job_id_prefix}-{digest[:8]}"


class BatchSizeOptimizer:
    """Gets this run's batch size from the server and reports its progress after every epoch.

    One process of a run talks to the server (in a distributed run, global rank 0:
    `zeus_bso.training.TrialSession` gives every rank its answers).

    Args:
        server_url: the zeus-bso server's root (``http://host:8000``; default:
            ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (a ``dict``, or a
            Hydra ``DictConfig``; its ``job_id`` may be left out: see `stable_job_id`).
        energy_meter: how to measure energy (default: `auto_meter`).
        token: the server's bearer token, if it has one (default: ``$ZEUS_BSO_TOKEN``).
        heartbeat_seconds: how often a training run renews its trial's lease (0: never;
            default: ``$ZEUS_BSO_HEARTBEAT_SECONDS``, else 60).
        retry_seconds: how long a request is retried while the server answers 503 or cannot
            be reached.
        run_key: this run's name, the same across its restarts (default: from the
            environment, `run_key_from_environment`).
        gpus: the whole run's GPUs (default: this process's meter's).
        on_server_unavailable: ``"fallback"``: when the server cannot be reached at start,
            train at the job's default batch size (or the last recommendation saved on this
            machine) with a warning; ``"raise"``: raise `ServerConnectionError`.
        raise_if_unconverged: raise `ZeusBSOTrainFailError`, once, when the run ends without
            reaching its target: from the `on_evaluate` whose answer ends it, as upstream Zeus's
            client does, or else from `end` (and the ``with`` block's exit).
        show: where the one-line summary of the run goes at `end` (default: standard error;
            None: nowhere).
        lr_rule: how the learning rate follows the batch size (`zeus_bso.scaling.LrRule`:
            ``none``, the default, ``linear``, ``sqrt`` or ``auto``), for `learning_rate` and
            `scale`.
        reference_batch_size: the batch size the learning rate was tuned at (default: the
            job's ``default_batch_size``).
        max_micro_batch_size: opts into gradient accumulation: a batch size above it, or at or
            above the smallest that ran out of memory on these GPUs, is trained as
            `accumulation_steps` micro-batches of `micro_batch_size` (the server may then give
            any of the job's batch sizes; out of memory lowers the micro-batch instead of
            making the size infeasible). None, the default: no accumulation.
        power_limit: ``"optimize"`` opts a single-process loop into GPU power limits: the first
            run of a batch size on these GPUs profiles the limits in its first steps (call
            `on_train_begin` with the steps of an epoch, and `on_step_begin` and `on_step_end`
            around every step), and runs train at the limit the server chooses; each GPU's own
            limit is restored when the run ends, on an exception, a lost lease or SIGTERM, and
            after a SIGKILL by the next run (see the power limits guide; in a distributed run,
            `zeus_bso.training.TrialSession` or an adapter). ``"off"``, the default.
        power_limits: only ask the server for the limit to train at (`power_limit`, or
            `power_profiling`: profile them first and `send_power_profile`), leaving the GPUs
            alone: what `zeus_bso.training.TrialSession` does on the main process, setting
            every process's GPUs itself.
        on_lease_lost: called (from the heartbeat's thread) when the server says the trial is
            no longer this run's.
        handle_sigterm: while the trial is open, turn SIGTERM (a preemption, a scheduler's
            time limit, ``kill``) into `zeus_bso.client.failure.Terminated`, a ``SystemExit``
            with status 143, so that the trial is released rather than left to its lease and
            charged to its batch size (`zeus_bso.client.sigterm`; a handler of the script's own
            is called first). False leaves SIGTERM alone.
    """

    def __init__(
        self,
        server_url: str | None = None,
        job: JobLike | None = None,
        energy_meter: EnergyMeter | None = None,
        token: str | None = None,
        *,
        heartbeat_seconds: float | None = None,
        retry_seconds: float = 30.0,
        run_key: str | None = None,
        gpus: GpuConfig | None = None,
        on_server_unavailable: Literal["fallback", "raise"] = "fallback",
        raise_if_unconverged: bool = False,
        show: Callable[[str], None] | None = show_on_stderr,
        lr_rule: LrRule = "none",
        reference_batch_size: int | None = None,
        max_micro_batch_size: int | None = None,
        power_limit: PowerLimitMode = "off",
        power_limits: bool = False,
        on_lease_lost: Callable[[], None] | None = None,
        handle_sigterm: bool = True,
    ) -> None:
        job = required_job(job)
        self._manages_power = check_power_limit(power_limit) == "optimize"
        self._power_limits = power_limits or self._manages_power
        self.power: PowerLimitRun | None = None
        """This run's GPU power limits (with ``power_limit="optimize"``, from `on_train_begin`)."""
        restore_left_over()  # what a run killed on this node left changed
        self.max_micro_batch_size = check_max_micro_batch_size(max_micro_batch_size)
        """Opts into gradient accumulation (see `accumulation`); None: none."""
        server_url, token = server_url_from(server_url), token_from(token)
        rule = job_lr_rule(job, lr_rule)
        self.lr = LrScaling(rule, reference_batch_size or job.default_batch_size)
        """The learning-rate rule and its reference batch size."""
        if on_server_unavailable not in ("fallback", "raise"):
            raise ConfigurationError(
                f"on_server_unavailable is 'fallback' or 'raise', not {on_server_unavailable!r}"
            )
        self.run_key = run_key if run_key is not None else run_key_from_environment()
        """This run's name, the same across its restarts (see `run_key_from_environment`)."""
        self.meter = energy_meter if energy_meter is not None else auto_meter()
        # An estimate's or RAPL's device stands in for a GPU in the job's profile: no GPU named.
        names_gpu = gpus is not None or not (self.meter.is_estimate or self.meter.name == "rapl")
        if gpus is None:
            gpus = GpuConfig(
                max_power=self.meter.max_power,
                number_of_gpus=self.meter.device_count,
                gpu_model=self.meter.device_model,
            )
        self._trains_on = gpus.gpu_model if names_gpu else "this machine"
        """Where the run trains, in words: the GPUs' model, or this machine."""
        spec = JobSpecFromClient(
            **job.model_dump(exclude={"job_id", "lr_rule"}),
            job_id=job.job_id,
            lr_rule=None if rule == "none" else rule,  # the rule is part of the job's history
            **gpus.model_dump(),
        )
        id_from_settings = spec.job_id is None
        if spec.job_id is None:
            spec = spec.model_copy(update={"job_id": stable_job_id(spec)})
        self._spec = spec
        self.job_id: str = spec.job_id or ""
        """The job's id (the spec's, or `stable_job_id`'s)."""
        self.client = ServerClient(server_url, token=token, retry_seconds=retry_seconds)
        self.link = JobConversation(
            self.client,
            spec,
            run_key=self.run_key,
            on_server_unavailable=on_server_unavailable,
            id_from_settings=id_from_settings,
            heartbeat_seconds=heartbeat_seconds_from(heartbeat_seconds),
        )
        """The run's conversation with the server."""
        self.link.on_lease_lost = on_lease_lost
        if self._manages_power:

            def lost() -> None:
                self._restore_power()
                if on_lease_lost is not None:
                    on_lease_lost()

            self.link.on_lease_lost = lost
        self.gpu = self.link.gpu
        """The GPUs this run trains on (its hardware profile), sent with the batch size request
        so that runs of one job on different hardware at once are told apart."""
        self.progress = TrialProgress(self.meter)
        self.outcome: RunOutcome | None = None
        """How the run ended (after `end`)."""
        self._raise_if_unconverged = raise_if_unconverged
        self._raised_unconverged = False
        self._fit_before = False
        self._batch_checked = False
        self._show = show
        self._memory_unknown = False
        self._reported: Elapsed | None = None
        self._final: Elapsed | None = None
        self._ended = False
        self._thread = threading.get_ident()
        self._sigterm = SigtermGuard()
        self._handle_sigterm = handle_sigterm
        atexit.register(self.abort)

    @property
    def job(self) -> CreatedJob | None:
        """The job as the server registered it (from `get_batch_size` or `resume` on)."""
        return self.link.job

    @property
    def offline(self) -> bool:
        """Whether the run trains without the server (it could not be reached at start)."""
        return self.link.offline

    @property
    def training_finished(self) -> bool:
        """Whether the server said stop (the run converged, or will not)."""
        return self.link.training_finished

    @property
    def converged(self) -> bool:
        """Whether the run reached its target (after the server's stop)."""
        return self.link.converged

    @property
    def power_limit(self) -> float | None:
        """The GPU power limit the server says to train at (W; with ``power_limits``)."""
        return self.link.power_limit

    @property
    def power_profiling(self) -> bool:
        """Whether the server asks this run to profile the power limits (with
        ``power_limits``): no profile of its batch size on these GPUs yet."""
        return self.link.power_profiling

    @property
    def server_chooses_power(self) -> bool:
        """Whether the server answered the dispatch with power limits (with ``power_limits``;
        upstream Zeus's server, or an older one, does not: the GPUs then keep their own)."""
        return self.link.server_chooses_power

    @property
    def trial(self) -> TrialId | None:
        """This run's trial (after `get_batch_size` or `resume`; None while offline)."""
        return self.progress.trial

    @property
    def current_epoch(self) -> int:
        """Epochs reported so far in this trial (a resumed run's included)."""
        return self.progress.epochs

    @property
    def batch_size(self) -> int | None:
        """The batch size of this run (after `get_batch_size`)."""
        if self.offline:
            return self.link.offline_batch_size
        return self.trial.batch_size if self.trial else None

    @property
    def trial_number(self) -> int | None:
        """The trial number of this run (after `get_batch_size`; None while offline)."""
        return self.trial.trial_number if self.trial else None

    def get_batch_size(self) -> int:
        """Register the job and ask the server for this run's batch size (once per run)."""
        if self.offline:
            assert self.link.offline_batch_size is not None
            return self.link.offline_batch_size
        trial = self.progress.trial
        if trial is None:
            self._supersede()
            dispatched = self.link.dispatch(
                accumulate=self.max_micro_batch_size is not None,
                power_limits=self._power_limits,
                deliver=MUST_DELIVER.get(),
            )
            if dispatched is None:  # the server is away: trains without it
                assert self.link.offline_batch_size is not None
                return self.link.offline_batch_size
            trial = dispatched.trial
            self._opened()
            if dispatched.resumed:
                # A restart of this run: its trial goes on from what it reported.
                self.progress.go_on(
                    trial, dispatched.current_epoch, dispatched.time, dispatched.energy
                )
                logger.info(
                    "run %r continues trial %d of job %s after epoch %d: batch size %d",
                    self.run_key,
                    trial.trial_number,
                    self.job_id,
                    dispatched.current_epoch,
                    trial.batch_size,
                )
            else:
                self.progress.trial = trial
                # Micro-batches of a size new to these GPUs are tried too.
                accumulated = self.accumulation.steps > 1
                self._memory_unknown = dispatched.memory_unknown or accumulated
                self._fit_before = not dispatched.memory_unknown
                logger.info(
                    "trial %d of job %s: batch size %d",
                    trial.trial_number,
                    self.job_id,
                    trial.batch_size,
                )
        return trial.batch_size

    @property
    def accumulation(self) -> Accumulation:
        """How this run trains its batch size: with ``max_micro_batch_size`` set, a batch size
        above it, or at or above the smallest that ran out of memory on these GPUs, is trained
        as micro-batches whose gradients accumulate before each optimizer step (the batch per
        step is the server's). Without, one micro-batch of the whole batch."""
        size = self.batch_size
        if size is None:
            raise OperationOrderError("call get_batch_size() before reading the accumulation")
        return plan(size, self.max_micro_batch_size, self.link.memory_cap)

    @property
    def micro_batch_size(self) -> int:
        """Samples a forward and backward pass: what the DataLoader gives (`accumulation`)."""
        return self.accumulation.micro_batch_size

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches an optimizer step (`accumulation`; 1: none)."""
        return self.accumulation.steps

    @property
    def memory_unknown(self) -> bool:
        """Whether no run of this batch size has reported on this run's hardware profile yet:
        whether it fits in memory is not known (see `fit_in_memory`)."""
        return self._memory_unknown and not self.offline and self.trial is not None

    def out_of_memory(self, why: str | None = None) -> int:
        """The run ran out of accelerator memory at its batch size, before it trained: the
        trial is marked ``infeasible`` on this hardware profile (neither that size nor a larger
        one is dispatched there again), and a new trial starts. Returns its batch size; build
        the DataLoader again with it.

        Raises:
            OperationOrderError: the run trains already (use `end_out_of_memory`), or has no
                trial (it trains without the server: no other batch size can be chosen).
            NoConvergedBatchSizeError: (through the server: `ServerRejectedError` 409) no
                batch size left fits on this profile.
        """
        trial = self.trial
        if trial is None or self.offline:
            raise OperationOrderError(
                "out of memory without a trial (training without the server): lower the job's "
                "default_batch_size, or train with max_micro_batch_size"
            )
        if self.progress.began:
            raise OperationOrderError(
                "out_of_memory() is for a batch size tried before training; a run that trains "
                "already ends with end_out_of_memory()"
            )
        self.link.infeasible(trial, self._trains_on, why)
        self.progress.trial = None
        self._memory_unknown = False
        return self.get_batch_size()

    def end_out_of_memory(self, why: str | None = None, *, goes_on: bool = False) -> None:
        """End a run that ran out of accelerator memory while it trained: its trial is marked
        ``infeasible`` on this hardware profile (neither its batch size nor a larger one is
        dispatched there again), and the outcome says so (``goes_on``: the framework trains on
        at a size of its own, outside the optimizer; `RunOutcome.went_on`)."""
        if self._ended:
            return
        if self._fit_before and not goes_on and self.trial is not None and not self.offline:
            # Runs of this size reported on these GPUs before: it fits; this is not its doing.
            self.release(
                f"batch size {self.batch_size} ran out of memory although it trained on "
                f"{self._trains_on} before, so the error is not the batch size's (a leak, "
                "another process on the GPU, a bug of the script's); not counted against it, "
                "and no memory cap is set" + (f" ({why})" if why else ""),
                StopReason.FAILED,
            )
            return
        trial = self.trial
        marked = (
            trial is not None
            and not self.offline
            and self.link.infeasible(trial, self._trains_on, why)
        )
        self._finish(end_trial=not marked and self.run_key is None)
        self._conclude(
            StopReason.OUT_OF_MEMORY,
            f"batch size {self.batch_size} ran out of memory" + (f" ({why})" if why else ""),
            went_on=goes_on,
        )

    def fit_in_memory(self, try_steps: Callable[[int], None]) -> int:
        """Find, before training, a batch size that fits: while whether this run's batch size
        fits is not known (`memory_unknown`), ``try_steps(size)`` runs a few training steps of
        ``size`` samples (the `micro_batch_size`: the batch size itself without accumulation)
        and undoes them; one that runs out of memory is marked ``infeasible`` and the server's
        next batch size is tried, or, with ``max_micro_batch_size``, smaller micro-batches
        (`micro_batch_out_of_memory`). Returns the micro-batch size to train at (the
        DataLoader's; `accumulation_steps` of them make an optimizer step).

        Other errors of ``try_steps`` are raised."""
        self.get_batch_size()
        while self.memory_unknown:
            why = _out_of_memory_at(try_steps, self.micro_batch_size)
            if why is None:
                self._memory_unknown = False
                break
            # Unless the smallest size fits, running out is not this size's doing.
            accumulates = self.max_micro_batch_size is not None
            smallest = smallest_to_try(self.micro_batch_size, self._spec.batch_sizes, accumulates)
            if smallest is None or _out_of_memory_at(try_steps, smallest) is not None:
                self.not_the_batch_size(why, smallest)
            self.micro_batch_out_of_memory(why)
        return self.micro_batch_size

    def not_the_batch_size(self, why: str, smallest: int | None) -> NoReturn:
        """Even the smallest size (``smallest``; None: the size that ran out was that one) ran
        out of memory in the memory check (``why``), so it is not the batch size's doing:
        release the trial, raise the error that says so.

        Raises:
            OutOfMemoryNotTheBatchSizeError: always.
        """
        size = self.micro_batch_size if smallest is None else smallest
        message = (
            f"out of memory even at {size} sample{'s' if size > 1 else ''} a step on "
            f"{self._trains_on} ({why}): not the batch size's doing (a bug that allocates "
            "whatever the batch, another process holding the GPU's memory, or a model that "
            "does not fit on this GPU); not counted against any batch size, no memory cap set"
        )
        self.release(message)
        raise OutOfMemoryNotTheBatchSizeError(message)

    def micro_batch_out_of_memory(self, why: str | None = None) -> int:
        """Micro-batches of `micro_batch_size` ran out of memory before the run trained. A run
        that accumulates (``max_micro_batch_size``) takes smaller micro-batches for the same
        batch size (the server lowers these GPUs' memory cap, and the trial goes on); one that
        does not, or whose micro-batch is one sample, is `out_of_memory`. Returns the new
        micro-batch size (build the DataLoader again with it)."""
        trial = self.trial
        micro = self.micro_batch_size
        if self.max_micro_batch_size is None or micro == 1 or trial is None or self.offline:
            self.out_of_memory(why)
            return self.micro_batch_size
        self.link.micro_batch_infeasible(trial, micro)
        cap = self.link.memory_cap
        self.link.memory_cap = micro if cap is None else min(cap, micro)
        logger.warning(
            "zeus-bso: micro-batches of %d ran out of memory on %s%s: batch size %d goes on "
            "as %d micro-batches of %d",
            micro,
            self._trains_on,
            f" ({why})" if why else "",
            trial.batch_size,
            self.accumulation_steps,
            self.micro_batch_size,
        )
        return self.micro_batch_size

    def send_power_profile(
        self,
        measurements: list[PowerMeasurement],
        limit_range_w: tuple[float, float] | None = None,
    ) -> float | None:
        """Send what this run measured at each power limit in its batch size's first epoch
        (``limit_range_w``: the lowest and highest limit its GPUs take); returns the limit to
        train at (None: the server could not take it, said in a warning)."""
        trial = self.trial
        if trial is None or self.offline:
            return None
        return self.link.power_profile(trial, measurements, limit_range_w)

    def smaller_size_out_of_memory(self, size: int, why: str | None = None) -> None:
        """After its trial ran out of memory (`end_out_of_memory`), the run went on at a
        smaller size of its framework's choosing (the HF Trainer's ``auto_find_batch_size``),
        and ``size`` ran out of memory too: the server brings these GPUs' memory cap down to it,
        so that no size from it up is dispatched there."""
        trial = self.trial
        if trial is None or self.offline:
            return
        if not self.link.micro_batch_infeasible(trial, size):
            return
        logger.info(  # the framework's own size: the framework says it shrank (a warning)
            "zeus-bso: batch size %d ran out of memory on %s too: no size from it up is "
            "dispatched there",
            size,
            self._trains_on,
        )

    def learning_rate(self, base_lr: float, optimizer: Any | None = None) -> float:
        """``base_lr``, tuned at the reference batch size, at this run's batch size by the
        ``lr_rule`` (``auto`` looks at ``optimizer``, an instance or a class name)."""
        return self.lr.learning_rate(base_lr, self._chosen_batch_size(), optimizer)

    def scale(self, optimizer: Any, *schedulers: Any) -> float:
        """Scale a built optimizer and its schedulers to this run's batch size by the
        ``lr_rule``, once (a second call, or a resumed optimizer marked so, changes nothing).
        Returns the factor."""
        return self.lr.scale(optimizer, self._chosen_batch_size(), schedulers)

    def _chosen_batch_size(self) -> int:
        size = self.batch_size
        if size is None:
            raise OperationOrderError("call get_batch_size() before scaling the learning rate")
        return size

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
        self._supersede()
        if not self.link.resume(trial, self.progress, power_limits=self._power_limits):
            return trial.batch_size  # the server is away: trains without it
        self._opened()
        logger.info("trial %d of job %s resumed", trial.trial_number, self.job_id)
        return trial.batch_size

    def _opened(self) -> None:
        """The run's trial is open (dispatched or resumed) until `_finish`: a later run of the
        job in this thread supersedes it, and SIGTERM releases it (``handle_sigterm``)."""
        _OPEN_RUNS.add(self)
        if self._handle_sigterm:
            self._sigterm.install()

    def _supersede(self) -> None:
        """End this process's earlier runs of the job, started on this thread, that never
        ended, as interrupted: nothing ends a run that Ctrl-C stopped in a notebook's cell
        (IPython catches the ``KeyboardInterrupt``; a framework without an exception hook, such
        as the HF Trainer, never hears of it), and its heartbeat would keep its trial open,
        an exploration in flight, until the kernel exits. A new run of the job from the same
        thread means the earlier one is over."""
        for other in list(_OPEN_RUNS):
            if (
                other is not self
                and other.job_id == self.job_id
                and other._thread == self._thread
                and not other._ended
            ):
                other.end_interrupted("a later run of the job started in this process")

    def on_train_begin(self, steps_per_epoch: int | None = None) -> None:
        """Start measuring time and energy, and keep the trial's lease alive (with
        ``power_limit="optimize"``: set the GPUs' limit, or start profiling them; an epoch's
        ``steps_per_epoch`` make a profile's epoch of its steps).

        Raises:
            PowerLimitError: the GPUs' limits cannot be optimized here (the trial is released).
        """
        if self.trial is None and not self.offline:
            raise OperationOrderError("call get_batch_size() before on_train_begin()")
        if self._manages_power and self.power is None and self.server_chooses_power:
            try:
                limits = GpuPowerLimits(records_folder())
            except PowerLimitError as err:
                self.release(str(err))
                raise
            self.power = PowerLimitRun(
                True,
                limits,
                lambda value: value,
                self.gpu,
                self._spec.eta_knob,
                self._spec.power_max_slowdown,
            )
            self.power.begin(
                self.power_limit, self.power_profiling, self.send_power_profile, steps_per_epoch
            )
        self.progress.begin()
        self.link.start_heartbeat(lambda: self.trial)

    def on_step_begin(self, batch: Any = None) -> None:
        """Before each training step (profiles power limits with ``power_limit="optimize"``).
        Given the step's ``batch``, the first one is checked against `micro_batch_size`: a
        DataLoader of another size would train one size while the server charges another.

        Raises:
            ConfigurationError: the first batch has another size (the trial is released).
        """
        if batch is not None and not self._batch_checked and self.batch_size is not None:
            self._batch_checked = True
            check_first_batch(batch, self.micro_batch_size, self.release)
        if self.power is not None:
            self.power.step_begin()

    def on_step_end(self) -> None:
        """After each training step (see `on_step_begin`)."""
        if self.power is not None:
            self.power.step_end()

    def _restore_power(self) -> None:
        if self.power is not None:
            self.power.restore()

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
        is sent again at `end`. Without the server from the start (`offline`), the run stops at
        its target or at ``max_epochs``.
        """
        if self.trial is None and not self.offline:
            raise OperationOrderError("call get_batch_size() and on_train_begin() first")
        if self.training_finished:
            return ReportResponse(
                stop_train=True, converged=self.converged, message="training already finished"
            )
        epoch = self.progress.epoch_done(epoch)
        if elapsed is None:
            elapsed = self.progress.elapsed()
        self.progress.reported(elapsed.joules)
        self._reported = elapsed
        if self.offline:
            answer = self._judged_here(metric, epoch)
            self._end_if_unconverged()
            return answer
        assert self.trial is not None
        steps = self.accumulation_steps
        result = TrainingResult(
            **self.trial.model_dump(),
            time=elapsed.seconds,
            energy=elapsed.joules,
            metric=metric,
            current_epoch=self.progress.epoch_to_report(epoch),
            accumulation_steps=steps if steps > 1 else None,
        )
        answer = self.link.report(result)  # one the server cannot take now: kept for later
        if answer.stop_train:
            self._end_if_unconverged()
        return answer

    def _end_if_unconverged(self) -> None:
        """With ``raise_if_unconverged``, the report that ends the run unconverged ends it and
        raises `ZeusBSOTrainFailError`, as upstream Zeus's ``on_evaluate`` does: a loop of
        upstream's shape (no ``with``, no `end`) gets the failure signal too.

        Raises:
            ZeusBSOTrainFailError: the server said stop, and the run did not converge.
        """
        if self._raise_if_unconverged and self.training_finished and not self.converged:
            self.end()

    def _judged_here(self, metric: float, epoch: int) -> ReportResponse:
        """A report without the server (`judged_without_server`)."""
        size = self.batch_size or self._spec.default_batch_size
        answer = judged_without_server(self._spec, size, metric, epoch)
        self.link.answered(answer)
        return answer

    def end(self, *, end_trial: bool = True, why: str | None = None) -> None:
        """End the trial: deliver an undelivered report, then tell the server the run is over;
        then say how the run went (`outcome`, and a line through ``show``).

        ``end_trial=False`` leaves the trial open for a restart that continues it (with the
        same run key) instead; its reports are delivered. Without a run key nothing can
        continue it, so a trial that has no report yet is released (nothing is charged to its
        batch size), and one with reports is left to its lease. ``why``: for a run that ended
        before the server said stop, the reason in words (e.g. the framework's own epoch limit).

        Raises:
            ZeusBSOTrainFailError: with ``raise_if_unconverged``, the run did not reach its
                target.
        """
        if end_trial and self._sigterm.received and not self.training_finished:
            self.end_interrupted("SIGTERM")  # a handler of the script's own stopped it
            self._raise_unless_converged()
            return
        unreported = self._reported is None and self.link.pending is None
        if not end_trial and self.run_key is None and unreported and self.trial is not None:
            self.release(why or "ended with end_trial=False before any report")
            self._raise_unless_converged()
            return
        self._finish(end_trial=end_trial, deliver=True)
        if self.outcome is None:
            if self.training_finished:
                self._conclude(None, None)
            else:
                self._conclude(
                    StopReason.ENDED_EARLY, why or "training ended before it was told to stop"
                )
        self._raise_unless_converged()

    def release(self, why: str, reason: StopReason = StopReason.NOT_TRAINED) -> None:
        """End a run that stopped for a reason that is not its batch size's (a misconfigured
        script, the framework's own epoch limit): its trial is released, which counts nothing
        against its batch size, and the outcome says ``reason`` and ``why``."""
        if self._ended:
            return
        released = self.trial is not None and not self.offline and self.link.release(self.trial)
        self._finish(end_trial=False)
        note = "" if released or self.trial is None else " (its trial is left to its lease)"
        self._conclude(reason, why + note)

    def failed(self, error: BaseException, *, trained: bool | None = None) -> None:
        """End a run that raised ``error``, charging its batch size only with what it did (see
        `zeus_bso.client.failure`): out of memory ends it as infeasible (`end_out_of_memory`);
        an interruption (Ctrl-C, a SIGTERM) releases its trial, or leaves it open for the
        restart of a run with a run key (`end_interrupted`); an error that is not the batch
        size's (a usage error of ours, or any before training, ``trained`` False) releases it;
        any other fails it (`abort`). ``trained`` defaults to whether training began."""
        why = failure.described(error)
        if self._ended:
            return
        if self.training_finished or self.trial is None or self.offline:
            self.abort(why)  # the server's stop came first (or none can come): as it said
            return
        judged = failure.verdict(error, trained=self.progress.began if trained is None else trained)
        if self._sigterm.received and judged is not failure.Verdict.OUT_OF_MEMORY:
            judged = failure.Verdict.INTERRUPTED  # e.g. a handler of the script's own exited
        failure.end_as(self, judged, why)

    def end_interrupted(self, why: str) -> None:
        """End a run interrupted from outside (``why``: Ctrl-C, a SIGTERM such as a
        preemption), which says nothing about its batch size: its trial is released, or, for a
        run with a run key, left open for the run's restart to continue."""
        if self._ended:
            return
        if self.run_key is None or self.trial is None:
            self.release(
                f"interrupted ({why}); not counted against it",
                StopReason.ENDED_EARLY,
            )
            return
        self._finish(end_trial=False)
        self._conclude(
            StopReason.ENDED_EARLY,
            f"interrupted ({why}); the run's restart (run key {self.run_key}) continues its trial",
        )

    def withdraw(self, why: str) -> None:
        """Take back this run's dispatch, which it will not train (a framework found, after
        asking, that the run resumes a checkpoint's trial instead): its trial is released, or,
        with a run key, left open for the resume to continue; no outcome is shown."""
        show, self._show = self._show, None
        try:
            self.end_interrupted(why)
        finally:
            self._show = show
        self.outcome = None

    def abort(self, why: str | None = None) -> None:
        """End a run that is failing (an exception, or an exit without `end`).

        Without a run key the trial ends (failed, unless its final report came). With one it is
        left open for the run's restart, which continues it; if no restart comes, its lease
        runs out and it is abandoned. At exit after an uncaught out-of-memory error, the trial
        is marked ``infeasible`` instead (`end_out_of_memory`).
        """
        if self._ended:
            return
        # At exit after an uncaught exception, the interpreter has set it aside: a run that
        # ran out of memory (a script without `with`, or a framework that calls no hook on
        # errors) ends as infeasible rather than failed, an interrupted one is not charged.
        uncaught = getattr(sys, "last_value", None) if why is None else None
        if uncaught is not None and (out_of_memory(uncaught) or failure.interrupted(uncaught)):
            self.failed(uncaught)
            return
        if self._sigterm.received and not self.training_finished:
            self.end_interrupted("SIGTERM")  # e.g. at exit after `Terminated`
            return
        started = self.trial is not None or self.offline
        self._finish(end_trial=self.run_key is None or self.training_finished)
        if not started:
            self.client.close()  # it never asked for a batch size: nothing to say
        elif self.training_finished:
            self._conclude(None, None)
        else:
            self._conclude(StopReason.FAILED, why or "the run raised or exited without end()")

    def _finish(self, *, end_trial: bool, deliver: bool | None = None) -> None:
        """Stop the heartbeat and the meter; deliver a pending report (``deliver``, by default
        when the trial ends) and end the trial (``end_trial``)."""
        if self._ended:
            return
        self._ended = True
        _OPEN_RUNS.discard(self)
        self._restore_power()
        self._sigterm.uninstall()
        atexit.unregister(self.abort)  # ended: the exit hook need not keep this object alive
        # The run's figures: its last report's (every rank's energy), else this process's.
        self._final = self._reported or self.progress.elapsed()
        try:
            self.link.finish(
                self.trial, end_trial=end_trial, deliver=end_trial if deliver is None else deliver
            )
        finally:
            self.meter.close()

    def _conclude(
        self, reason: StopReason | None, why: str | None, *, went_on: bool = False
    ) -> None:
        """Set `outcome` (``reason`` None: the server's answer says it) and show its line."""
        if self.outcome is not None:
            return
        answer = self.link.answer
        if reason is None:
            assert answer is not None
            reason = answer.reason or (
                StopReason.CONVERGED if answer.converged else StopReason.MAX_EPOCHS
            )
            why = answer.why or answer.message
        elapsed = self._final if reason is not StopReason.NOT_TRAINED else None
        self.outcome = RunOutcome(
            job_id=self.job_id,
            batch_size=self.batch_size or self._spec.default_batch_size,
            trial_number=self.trial_number,
            converged=self.converged,
            reason=reason,
            why=why or "",
            epochs=self.progress.epochs,
            max_epochs=self._spec.max_epochs,
            seconds=elapsed.seconds if elapsed else 0.0,
            joules=elapsed.joules if elapsed else 0.0,
            cost=answer.cost if answer is not None else None,
            next_run=self.link.next_run(),
            next_refused=self.link.next_refused,
            offline=self.offline,
            went_on=went_on,
            accumulation_steps=self._accumulation_steps(),
        )
        self.client.close()
        if self._show is not None:
            self._show(self.outcome.summary())

    def _accumulation_steps(self) -> int:
        """Micro-batches a step of this run (one where it had no batch size)."""
        return self.accumulation.steps if self.batch_size is not None else 1

    def _raise_unless_converged(self) -> None:
        """Raise `ZeusBSOTrainFailError` for an unconverged run, once (with
        ``raise_if_unconverged``): the report that ended the run raised it, so the ``with``
        block's exit, or an `end` after it, does not raise it again."""
        if self._raise_if_unconverged and self.outcome is not None and not self.outcome.converged:
            if self._raised_unconverged:
                return
            self._raised_unconverged = True
            raise ZeusBSOTrainFailError(self.outcome.summary(), self.outcome)

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
            self.failed(exc)


def _out_of_memory_at(try_steps: Callable[[int], None], size: int) -> str | None:
    """Run ``try_steps(size)``: its out-of-memory error's words, or None where it fit (another
    error is raised)."""
    try:
        try_steps(size)
    except Exception as err:
        if not out_of_memory(err):
            raise
        free_accelerator_memory()
        return out_of_memory_words(err)
    return None


def judged_without_server(
    spec: JobSpec, batch_size: int, metric: float, epoch: int
) -> ReportResponse:
    """A report that no server judges (the server is down, or the run trains at a size the
    optimizer did not choose), by the policy's own rules without a cost bound (no run to compare
    with): stop at the job's target or at its ``max_epochs``."""
    rules = StopRules(
        spec.target_metric,
        spec.higher_is_better_metric,
        spec.max_epochs,
        beta_knob=None,
        prune_cost_ratio=None,
        reference="best_run",
        predictive=False,
        learning_curve=False,
        cost_to_go=False,
    )
    report = Report(batch_size=batch_size, cost=0.0, metric=metric, epoch=epoch)
    return answer_of(judge_report(rules, report, None)).model_copy(update={"cost": None})
