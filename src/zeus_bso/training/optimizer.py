"""``BatchSizeOptimizer``: what a plain training loop talks to, with upstream Zeus's names.

It is the training session (`zeus_bso.training.TrialSession`) in a world of one: one process,
whose collectives are the identity, even inside a distributed program. One object per run::

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
(`zeus_bso.client.job_ids.stable_job_id`), so every recurrence of the same job finds the same
history without copying ids around; change any setting and it is a new job, which learns from
scratch: the run says so, naming the settings that changed (`zeus_bso.client.new_job`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Literal

from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.http import ServerClient
from zeus_bso.client.outcome import show_on_stderr
from zeus_bso.client.progress import Elapsed
from zeus_bso.energy import EnergyMeter
from zeus_bso.errors import ConfigurationError, OperationOrderError
from zeus_bso.options import JobLike
from zeus_bso.power.run import PowerLimitMode
from zeus_bso.scaling.lr import LrRule
from zeus_bso.spec import CreatedJob, GpuConfig, PowerMeasurement, ReportResponse, TrialId
from zeus_bso.training.collectives import WORLD_OF_ONE, launcher_rank
from zeus_bso.training.session import TrialSession
from zeus_bso.training.shared_trial import shared_trial


def refuse_other_ranks() -> None:
    """Refuses a `BatchSizeOptimizer` run on a process other than rank 0 of a run of several
    (``torch.distributed``'s process group, else the launcher's ``RANK`` and ``WORLD_SIZE``):
    on every rank, each registered a run of its own at a batch size of its own (rank 0 trained
    at 64 while rank 1 trained at 128, each charged with its own GPU's energy).

    Raises:
        ConfigurationError: saying what to use instead.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = launcher_rank()
    if rank == 0 or world < 2:
        return
    raise ConfigurationError(
        f"BatchSizeOptimizer is a run of one process, and this is rank {rank} of {world}: on"
        " every rank it would register a run of its own, at a batch size of its own. Use"
        " zeus_bso.training.TrialSession on every rank (rank 0 asks the server, every rank"
        " trains at its answer, each GPU's energy is counted once), or call get_batch_size()"
        " on rank 0 alone and broadcast the batch size"
    )


def _not_logged(values: dict[str, float], step: int) -> None:
    """A plain loop has no framework logger: `TrialSession.last` keeps what a report logged."""


class BatchSizeOptimizer(TrialSession):
    """Gets this run's batch size from the server and reports its progress after every epoch:
    the training session of a run of one process, with upstream Zeus's method names.

    Args:
        server_url: the zeus-bso server's root (``http://host:8000``; default:
            ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (a ``dict``, or a
            Hydra ``DictConfig``; its ``job_id`` may be left out:
            `zeus_bso.client.job_ids.stable_job_id`).
        energy_meter: how to measure energy (default: `zeus_bso.energy.process_meter`).
        token: the server's bearer token, if it has one (default: ``$ZEUS_BSO_TOKEN``).
        heartbeat_seconds: how often a training run renews its trial's lease (0: never;
            default: ``$ZEUS_BSO_HEARTBEAT_SECONDS``, else 60).
        retry_seconds: how long a request is retried while the server answers 503 (or a
            reverse proxy 429 or 408) or cannot be reached.
        run_key: this run's name, the same across its restarts (default: from the
            environment, `zeus_bso.client.job_ids.run_key_from_environment`).
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
        power_limit: ``"optimize"`` opts into GPU power limits: the first run of a batch size
            on these GPUs profiles the limits in its first steps (call `on_train_begin` with
            the steps of an epoch, and `on_step_begin` and `on_step_end` around every step),
            and runs train at the limit the server chooses; each GPU's own limit is restored
            when the run ends, on an exception, a lost lease or SIGTERM, and after a SIGKILL by
            the next run (see the power limits guide). ``"off"``, the default.
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
        handle_sigterm: bool = True,
    ) -> None:
        super().__init__(
            True,
            _not_logged,
            server_url,
            job,
            energy_meter=energy_meter,
            token=token,
            on_server_unavailable=on_server_unavailable,
            raise_if_unconverged=raise_if_unconverged,
            show=show,
            lr_rule=lr_rule,
            reference_batch_size=reference_batch_size,
            max_micro_batch_size=max_micro_batch_size,
            power_limit=power_limit,
            handle_sigterm=handle_sigterm,
            collectives=WORLD_OF_ONE,
            gpus=gpus,
            run_key=run_key,
            heartbeat_seconds=heartbeat_seconds,
            retry_seconds=retry_seconds,
            start=False,
        )
        self.server = self._new_server()  # from the start: nothing said before get_batch_size
        self.gpu = self.server.link.gpu
        """The GPUs this run trains on (its hardware profile), sent with the batch size request
        so that runs of one job on different hardware at once are told apart."""

    # What the run is, before and after it asked for its batch size.

    @property
    def job_id(self) -> str:
        """The job's id (the spec's, or `zeus_bso.client.job_ids.stable_job_id`'s)."""
        return self._main().job_id

    @property
    def run_key(self) -> str | None:
        """This run's name, the same across its restarts (None: it has none)."""
        return self._main().run_key

    @property
    def link(self) -> JobConversation:
        """The run's conversation with the server."""
        return self._main().link

    @property
    def client(self) -> ServerClient:
        """The HTTP session to the server."""
        return self._main().link.client

    @property
    def job(self) -> CreatedJob | None:
        """The job as the server registered it (from `get_batch_size` or `resume` on)."""
        return self._main().job

    @property
    def offline(self) -> bool:
        """Whether the run trains without the server (it could not be reached at start)."""
        return self._main().offline

    @property
    def training_finished(self) -> bool:
        """Whether the server said stop (the run converged, or will not)."""
        return self._main().training_finished

    @property
    def trial(self) -> TrialId | None:
        """This run's trial (after `get_batch_size` or `resume`; None while offline)."""
        return self._main().trial

    @trial.setter
    def trial(self, value: TrialId | None) -> None:
        """The session's shared trial: this process's own."""

    @property
    def batch_size(self) -> int | None:  # type: ignore[override]
        """The batch size of this run (after `get_batch_size`)."""
        return self._main().batch_size

    @property
    def current_epoch(self) -> int:
        """Epochs reported so far in this trial (a resumed run's included)."""
        return self.progress.epochs

    @property
    def max_micro_batch_size(self) -> int | None:
        """Opts into gradient accumulation (see `accumulation`); None: none."""
        return self._max_micro_batch_size

    @property
    def power_limit(self) -> float | None:
        """The GPU power limit the server says to train at (W)."""
        return self._main().link.power_limit

    # Upstream Zeus's names.

    def get_batch_size(self) -> int:
        """Register the job and ask the server for this run's batch size (once per run).

        Raises:
            ConfigurationError: this process is not rank 0 of several (`refuse_other_ranks`).
            PowerLimitError: with ``power_limit="optimize"``, the GPUs' limits cannot be set
                here (a MIG slice, a GPU that other processes compute on); the trial is
                released.
        """
        refuse_other_ranks()
        self.start(None)
        return self._chosen()

    def resume(self, saved: Mapping[str, Any]) -> int:
        """Continue the trial of a `checkpoint` after a restart (instead of `get_batch_size`).
        Returns its batch size.

        Raises:
            ConfigurationError: ``saved`` is not a checkpoint of a trial.
        """
        refuse_other_ranks()
        self.start(saved)
        return self._chosen()

    def _chosen(self) -> int:
        size = self._main().batch_size
        assert size is not None
        return size

    def _started_or_raise(self, what: str) -> None:
        if self._main().batch_size is None:
            raise OperationOrderError(f"call get_batch_size() before {what}")

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
        return super().fit_in_memory(try_steps)

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
        self._started_or_raise("out_of_memory()")
        self._main().out_of_memory(why)
        self._took(shared_trial(self._main(), self._chosen()))
        return self._chosen()

    def micro_batch_out_of_memory(self, why: str | None = None) -> int:
        """Micro-batches of `micro_batch_size` ran out of memory before the run trained. A run
        that accumulates (``max_micro_batch_size``) takes smaller micro-batches for the same
        batch size (the server lowers these GPUs' memory cap, and the trial goes on); one that
        does not, or whose micro-batch is one sample, is `out_of_memory`. Returns the new
        micro-batch size (build the DataLoader again with it)."""
        self._started_or_raise("micro_batch_out_of_memory()")
        return self.next_size_after_out_of_memory(why)

    def send_power_profile(
        self,
        measurements: list[PowerMeasurement],
        limit_range_w: tuple[float, float] | None = None,
    ) -> float | None:
        """Send what this run measured at each power limit in its batch size's first epoch;
        returns the limit to train at (None: the server could not take it)."""
        return self._main().send_power_profile(measurements, limit_range_w)

    def learning_rate(self, base_lr: float, optimizer: Any | None = None) -> float:
        """``base_lr``, tuned at the reference batch size, at this run's batch size by the
        ``lr_rule`` (``auto`` looks at ``optimizer``, an instance or a class name)."""
        self._started_or_raise("scaling the learning rate")
        return super().learning_rate(base_lr, optimizer)

    def scale(self, optimizer: Any, *schedulers: Any) -> float:
        """Have the steps of a built optimizer take its schedule's rates at this run's batch
        size by the ``lr_rule`` (see `TrialSession.scale`). Returns the factor."""
        self._started_or_raise("scaling the learning rate")
        return super().scale(optimizer, *schedulers)

    def on_train_begin(self, steps_per_epoch: int | None = None) -> None:
        """Start measuring time and energy, and keep the trial's lease alive (with
        ``power_limit="optimize"``: set the GPUs' limit, or start profiling them; an epoch's
        ``steps_per_epoch`` make a profile's epoch of its steps).

        Raises:
            PowerLimitError: the server chose a limit these GPUs cannot take (the trial is
                released by the ``with`` block, or by `failed`).
        """
        if self._main().trial is None and not self.offline:
            raise OperationOrderError("call get_batch_size() before on_train_begin()")
        self.train_begin(steps_per_epoch)

    def on_step_begin(self, batch: Any = None) -> None:
        """Before each training step (profiles power limits with ``power_limit="optimize"``).
        Given the step's ``batch``, the first one is checked against `micro_batch_size`: a
        DataLoader of another size would train one size while the server charges another.

        Raises:
            ConfigurationError: the first batch has another size (the trial is released).
        """
        self.step_begin(batch if self._main().batch_size is not None else None)

    def on_step_end(self) -> None:
        """After each training step (see `on_step_begin`)."""
        self.step_end()

    def elapsed(self) -> Elapsed:
        """Seconds and joules (this process's meter) since training began."""
        return self.progress.elapsed()

    def on_evaluate(
        self, metric: float, epoch: int | None = None, elapsed: Elapsed | None = None
    ) -> ReportResponse:
        """Report the validation metric of the epoch just finished; says whether to stop.

        ``epoch`` (from 1) is the run's epoch count, for a loop that validates every few epochs
        (default: one more than reported). ``elapsed``: the run's seconds and joules since
        training began (default: this process's clock and meter, read once here).
        If the server cannot be reached, training goes on (a warning is logged) and the report
        is sent again at `end`. Without the server from the start (`offline`), the run stops at
        its target or at ``max_epochs``.

        Raises:
            OperationOrderError: `get_batch_size` was not called, or `on_train_begin` was not
                and no ``elapsed`` was given (the run would report no time or energy: a run
                that cost nothing, which the job would learn as the cheapest).
            ZeusBSOTrainFailError: with ``raise_if_unconverged``, the server said stop and the
                run did not converge.
        """
        if self._main().trial is None and not self.offline:
            raise OperationOrderError("call get_batch_size() and on_train_begin() first")
        if elapsed is None and not self.progress.began:
            raise OperationOrderError(
                "call on_train_begin() when training starts, before on_evaluate(): without it"
                " the run has measured no time or energy (or pass elapsed= with your own)"
            )
        answer = self._evaluate(metric, epoch, elapsed or self.progress.elapsed())
        assert answer is not None
        return answer

    def failed(
        self, error: BaseException, *, trained: bool | None = None, in_evaluation: bool = False
    ) -> None:
        """End a run that raised ``error`` (see `TrialSession.failed`); ``trained`` defaults
        to whether training began; ``in_evaluation``: it was raised in the loop's evaluation
        (out of memory there is not the batch size's)."""
        trained = self._trained() if trained is None else trained
        super().failed(error, trained=trained, in_evaluation=in_evaluation)

    def _trained(self) -> bool:
        """Whether the run trained: upstream's loop began training (`on_train_begin`)."""
        return self.progress.began


__all__ = ["BatchSizeOptimizer"]
