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

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from typing_extensions import Unpack, override

from zeus_bso.client.accumulation import Accumulation
from zeus_bso.client.batches import check_first_batch
from zeus_bso.client.failure import SigtermExceptions
from zeus_bso.client.outcome import NOT_REPORTED, ReportAnswer, show_on_stderr
from zeus_bso.client.power import restore_left_over
from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.energy import process_meter, say_every_gpu
from zeus_bso.errors import ConfigurationError, OperationOrderError
from zeus_bso.options import JobLike, job_lr_rule, required_job
from zeus_bso.power.run import PowerLimitRun
from zeus_bso.scaling.lr import LrScaling
from zeus_bso.spec import GpuConfig, PowerMeasurement, ReportResponse, Technique, TrialId
from zeus_bso.training import size_changes
from zeus_bso.training.apart import RanOutAtExit
from zeus_bso.training.collectives import (
    DISTRIBUTED,
    Collectives,
    elapsed_of_the_run,
    from_rank_zero,
    gpus_of_the_run,
    metrics_apart,
    open_window,
)
from zeus_bso.training.first_report import FirstReport
from zeus_bso.training.memory_check import MemoryCheck
from zeus_bso.training.power import RunPower
from zeus_bso.training.rate import RunRate
from zeus_bso.training.server_run import ServerRun
from zeus_bso.training.server_settings import ServerSettings
from zeus_bso.training.session_endings import SessionEndings
from zeus_bso.training.session_options import SessionOptions, checked_options
from zeus_bso.training.shared_gpus import SharedGpus
from zeus_bso.training.shared_trial import (
    LR_FACTOR_KEY,
    SharedTrial,
    saved_lr_factor,
    shared_trial,
)
from zeus_bso.training.trained_models import remember, trained_here, trained_parameters
from zeus_bso.training.trial_file import Resume, saved_trial

logger = logging.getLogger(__name__)


class TrialSession(SessionEndings):
    """One run's trial on every process of a training loop: the batch size, the reports, the
    stop, each GPU's energy once, the framework's logging, and the run's outcome.

    Args:
        is_main: whether this is the process that talks to the server (global rank 0).
        log: how the framework logs values at a step (its trackers), on every process.
        server_url: the zeus-bso server (None: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (a ``dict``, or a
            Hydra ``DictConfig``; its ``job_id`` may be left out:
            `zeus_bso.client.job_ids.stable_job_id`).
        broadcast: sends a picklable object from the main process to every process and returns
            it there (default: the ``collectives``' broadcast).
        show: how the main process shows the run's one-line summary at the end (the
            framework's console; default: standard error; None: not shown).
        raise_from_report: False for a framework whose callback raises at the end of the
            fit, with ``raise_if_unconverged``, instead of the report (Lightning, the HF
            Trainer: the fit's own end, its checkpoints and loggers, go first).
        handle_sigterm: on the main process, while the trial is open, SIGTERM (a preemption,
            a scheduler's time limit, ``kill``) raises `zeus_bso.client.failure.Terminated`, a
            ``SystemExit`` with status 143, so that the trial is released rather than left to its
            lease (`zeus_bso.client.sigterm`; a handler of the script's own is called first);
            False for a framework that handles SIGTERM itself (Lightning).
        sigterm_exceptions: the exceptions such a framework raises on SIGTERM (Lightning's
            ``SIGTERMException``): an interruption, as `zeus_bso.client.failure.Terminated`,
            that releases the trial (and gets SIGTERM's exit status where it has none).
        collectives: how the processes share objects (default: ``torch.distributed``'s where a
            process group is initialised; `zeus_bso.training.collectives.WORLD_OF_ONE` for a
            run of one process).
        gpus: the whole run's GPUs (default: every process's meter's devices, each once).
        run_key: this run's name, the same across its restarts (default: from the
            environment, `zeus_bso.client.job_ids.run_key_from_environment`).
        heartbeat_seconds: how often the main process renews its trial's lease (0: never;
            default: ``$ZEUS_BSO_HEARTBEAT_SECONDS``, else 60).
        retry_seconds: how long a request is retried while the server answers 503 (or a
            reverse proxy 429 or 408) or cannot be reached.
        start: ask for the trial now (False: at `start`, which a run of one process calls
            when its script asks for the batch size).
        by_framework: a framework's callback drives the run (Lightning, HF): it scales the
            optimizers it finds and the framework accumulates as it set, so the loop's own
            `scale` and its steps a micro-batch are not checked (False: a loop's session).
        options: the options an adapter passes on, by name (``energy_meter``, ``token``,
            ``resume``, ``on_server_unavailable``, ``raise_if_unconverged``, ``lr_rule``,
            ``reference_batch_size``, ``max_micro_batch_size``, ``power_limit``):
            `zeus_bso.training.session_options.SessionOptions`, which says what each does;
            each is checked (`checked_options`) before anything else.
    """

    def __init__(
        self,
        is_main: bool,
        log: Callable[[dict[str, float], int], None],
        server_url: str | None,
        job: JobLike | None,
        *,
        broadcast: Callable[[Any], Any] | None = None,
        show: Callable[[str], None] | None = show_on_stderr,
        handle_sigterm: bool = True,
        raise_from_report: bool = True,
        collectives: Collectives = DISTRIBUTED,
        gpus: GpuConfig | None = None,
        run_key: str | None = None,
        heartbeat_seconds: float | None = None,
        retry_seconds: float = 30.0,
        sigterm_exceptions: SigtermExceptions = (),
        start: bool = True,
        by_framework: bool = False,
        **options: Unpack[SessionOptions],
    ) -> None:
        job = required_job(job)
        options = checked_options(options, job, takes=type(self).__init__)
        energy_meter = options.get("energy_meter")
        raise_if_unconverged = options.get("raise_if_unconverged", False)
        self._job = job
        self._max_micro_batch_size = options.get("max_micro_batch_size")
        self._batch_sizes = list(job.batch_sizes)
        self._power = RunPower(options.get("power_limit", "off") == "optimize")
        restore_left_over()  # what a run killed on this node left changed
        rule = job_lr_rule(job, options.get("lr_rule", "none"))
        reference = options.get("reference_batch_size")
        self.lr = LrScaling(rule, reference or job.default_batch_size)
        """The learning-rate rule and its reference batch size."""
        self._rate = RunRate(self.lr)
        self._by_framework = by_framework
        """Whether a framework's adapter drives the run (the Lightning and HF callbacks): it
        scales the optimizers it finds and accumulates as it set them to. Otherwise the
        script's loop does (`scale`, `learning_rate`; a step every `accumulation_steps`
        micro-batches), and `train_begin` and the first report check that it did."""
        self.is_main = is_main
        self.precision: str | None = None
        self.techniques: list[Technique] | None = None
        """What the framework's adapter says of the run, for its reports beside the model's size
        (``bf16-mixed``; activation checkpointing); None in a plain loop (its code's own)."""
        self._log = log
        self._collectives = collectives.with_broadcast(broadcast)
        self._raise_if_unconverged = raise_if_unconverged
        self._raise_from_report = raise_if_unconverged and raise_from_report
        self._raised = False
        self.last: dict[str, float] = {}
        """What the latest report logged (``bso/batch_size``, ``bso/energy_j``, ``bso/cost``)."""
        self.converged = False
        """Whether the run reached its target (on every process, from the server's stop)."""
        self.stopped = False
        """Whether the server said stop (on every process)."""
        self.meter = energy_meter if energy_meter is not None else process_meter()
        if energy_meter is None and is_main:
            say_every_gpu(self.meter)  # one GPU of several trained, all of them charged
        self.progress = TrialProgress(self.meter)
        """This process's trial, epochs, time and energy."""
        self._shared = SharedGpus(self.meter)
        # Every process's GPUs, each once: the job's GPU count and power are the whole run's.
        names_gpu = gpus is not None or not (self.meter.is_estimate or self.meter.name == "rapl")
        self._gpus = gpus if gpus is not None else gpus_of_the_run(self._collectives, self.meter)
        # An estimate's or RAPL's device stands in for a GPU in the job's profile: no GPU named.
        self._trains_on = self._gpus.gpu_model if names_gpu else "this machine"
        self._talk = ServerSettings(
            server_url,
            options.get("token"),
            rule,
            run_key,
            options.get("on_server_unavailable", "fallback"),
            heartbeat_seconds,
            retry_seconds,
            show,
            handle_sigterm,
            sigterm_exceptions,
        )
        self._sigterm_exceptions = sigterm_exceptions
        self._apart = RanOutAtExit(self._talk)
        self.server: ServerRun | None = None
        """The main process's side of the run: its trial, reports, end and outcome."""
        self._batch_size = 0
        self._job_id = ""
        self.trial: TrialId | None = None
        """The server's trial of this run (None: it trains without the server)."""
        self.resumed = False
        """Whether the run continues a checkpoint's trial (after `start`)."""
        self._memory_unknown = False
        self._accumulation = Accumulation.none(1)
        self._started = False
        self._began = False
        self._batch_checked = False
        self._apart_said = False
        self._first = FirstReport()  # the optimizer steps from train_begin, and what they say
        self._first.steps.first_step = self._refuse_trained
        self._loop_steps: int | None = None  # train_begin's steps_per_epoch
        self._size_changes = size_changes.mark()  # marked again as the run starts
        if start:
            self.start(options.get("resume"))

    def _new_server(self) -> ServerRun:
        """The main process's side of the run (no network yet)."""
        return self._talk.run(
            self._job,
            self._gpus,
            self.progress,
            max_micro_batch_size=self._max_micro_batch_size,
            power_limits=self._power.optimize,
            trains_on=self._trains_on,
            on_end=self._power.restore,
        )

    def start(self, resume: Resume) -> None:
        """Ask for this run's trial, or resume a checkpoint's (``resume``), on every process
        at once (once; the constructor does it unless ``start=False``)."""
        if self._started:
            return
        self._size_changes = size_changes.mark()  # an elastic batch size's steps from here

        def trial_of_this_run() -> SharedTrial:
            if self.server is None:
                self.server = self._new_server()
            saved = saved_trial(resume)
            if not saved or not self.server.continues(saved, resume):
                return shared_trial(self.server, self.server.dispatch())
            shared = shared_trial(self.server, self.server.resume(saved))
            return replace(shared, resumed=True, lr_factor=saved_lr_factor(saved))

        self._took(from_rank_zero(self._collectives.broadcast, self.is_main, trial_of_this_run))
        self._started = True
        try:
            self._power.start(self._collectives, self.is_main, self._gpus, self._job)
        except ConfigurationError as err:
            self.release(str(err))  # not the batch size's fault
            raise

    def _took(self, shared: SharedTrial) -> None:
        """Take rank 0's trial (`shared_trial`) on this rank."""
        self._batch_size = shared.batch_size
        self._job_id = shared.job_id
        self.trial = shared.trial
        if self.server is None:  # the main process's progress holds the server's trial
            self.progress.trial = self.trial
        if not self.is_main and self.trial is not None:  # its out of memory, said from here
            self._apart.watch(self.trial)
        self._memory_unknown = shared.memory_unknown
        self._accumulation = shared.accumulation
        self.resumed = shared.resumed
        if shared.resumed:
            self._rate.resumed_factor = shared.lr_factor
        self._power.answer = shared.power

    @property
    def batch_size(self) -> int:
        """The batch size of this run, per process and optimizer step (what each process's
        DataLoader takes, unless the run accumulates: `micro_batch_size`)."""
        return self._batch_size

    @property
    def accumulation(self) -> Accumulation:
        """How this run trains its batch size: with ``max_micro_batch_size`` set, a batch size
        above it, or at or above the smallest that ran out of memory on these GPUs, is trained
        as micro-batches whose gradients accumulate before each optimizer step (the batch per
        step is the server's). Without, one micro-batch of the whole batch."""
        if not self._started:
            raise OperationOrderError("call get_batch_size() before reading the accumulation")
        return self._accumulation

    @property
    def micro_batch_size(self) -> int:
        """Samples a forward and backward pass on each process: the DataLoader's batch size
        (the batch size itself, unless the run accumulates gradients)."""
        return self.accumulation.micro_batch_size

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches whose gradients add up before each optimizer step (1: none)."""
        return self.accumulation.steps

    @property
    def memory_unknown(self) -> bool:
        """Whether no run of this batch size has reported on this hardware profile yet (see
        `fit_in_memory`)."""
        return self._memory_unknown

    def fit_in_memory(self, try_steps: Callable[[int], None]) -> int:
        """Find, before training, a batch size that fits in memory on every process; every
        process calls it. While the batch size's fit is not known (`memory_unknown`), each
        process runs ``try_steps(batch_size)`` (a few training steps, undone; it must not wait
        in a collective); if any process ran out of memory, the trial is marked
        ``infeasible`` and every process tries the server's next batch size (a run that
        accumulates tries smaller micro-batches first). Returns the size each process's
        DataLoader takes: the batch size, or the `micro_batch_size` of a run that accumulates.

        Raises:
            ZeusBSOError: on every process, when any process's ``try_steps`` failed otherwise
                (that process raises its own error), or no batch size left fits (409).
        """
        return self._memory_check().fit(try_steps)

    def next_size_after_out_of_memory(self, why: str | None = None) -> int:
        """The run's micro-batch ran out of memory before it trained: a run that accumulates
        takes smaller micro-batches for its batch size; otherwise the trial is marked
        ``infeasible`` and the server's next batch size is taken (on every process). Returns
        the size each process's DataLoader takes now."""

        def next_size() -> SharedTrial:
            server = self._main()
            server.micro_batch_out_of_memory(why)
            return shared_trial(server, server.dispatch())

        self._took(from_rank_zero(self._collectives.broadcast, self.is_main, next_size))
        return self.micro_batch_size

    def _main(self) -> ServerRun:
        """The main process's side of the run (on the main process, once started)."""
        if self.server is None:
            raise OperationOrderError("the run has not asked for its batch size yet")
        return self.server

    def memory_fits(self) -> None:
        """The memory check found that the batch size fits (every process)."""
        self._memory_unknown = False
        if self.server is not None:
            self.server.fits()

    def on_main(self, act: Callable[[ServerRun], object]) -> None:
        """``act`` on the main process's side of the run, on the main process; its error is
        raised on every process."""
        from_rank_zero(self._collectives.broadcast, self.is_main, lambda: act(self._main()))

    def _memory_check(self) -> MemoryCheck:
        accumulates = self._max_micro_batch_size is not None
        return MemoryCheck(self, self._collectives, self._batch_sizes, accumulates)

    def check_memory(self, try_steps: Callable[[int], None], *, goes_on: bool = False) -> None:
        """For a framework that cannot change the batch size of a run under way (the HF
        Trainer): while the batch size's fit is not known (`memory_unknown`), each process runs
        ``try_steps(batch_size)`` (a few training steps, undone; no collective); if any ran out
        of memory, the trial is marked ``infeasible`` and every process raises
        `BatchSizeDoesNotFitError` (the next run gets a size that fits: `until_converged`
        starts it; ``goes_on``: the framework catches it and trains on at a size of its own,
        the HF Trainer's ``auto_find_batch_size``).

        Raises:
            BatchSizeDoesNotFitError: on every process, the batch size ran out of memory on one.
            ZeusBSOError: on every process, when one process's ``try_steps`` failed otherwise
                (that process raises its own error).
        """
        self._memory_check().check(try_steps, goes_on=goes_on)

    @property
    def trial_number(self) -> int | None:
        """The server's number of this run's trial (None: it trains without the server)."""
        return self.trial.trial_number if self.trial is not None else None

    @property
    def job_id(self) -> str:
        """The job this run is a recurrence of."""
        return self._job_id

    def learning_rate(self, base_lr: float, optimizer: Any | None = None) -> float:
        """``base_lr``, tuned at the reference batch size, at this run's batch size by the
        ``lr_rule`` (``auto`` looks at ``optimizer``, an instance or a class name)."""
        self._rate.asked = True
        return self.lr.learning_rate(base_lr, self.batch_size, optimizer)

    def scale(self, optimizer: Any, *schedulers: Any) -> float:
        """Have the steps of a built optimizer take its schedule's rates at this run's batch
        size by the ``lr_rule`` (`zeus_bso.scaling.lr.scale_optimizer`: the schedule is left
        as it is, and every step takes its rates times the factor); every process calls it.
        A run resumed from a checkpoint keeps the checkpoint's factor. Returns the factor; the
        reports log the rate the steps take as ``bso/lr`` from then on."""
        return self._rate.scale(optimizer, self.batch_size, schedulers)

    @property
    def lr_factor(self) -> float | None:
        """The factor the run's optimizer steps take their schedule's rates by (`scale`; None:
        no optimizer scaled)."""
        return self._rate.saved_factor()

    def warmup_steps(self, steps: int) -> int:
        """Warm-up steps at this run's batch size that see the samples ``steps`` saw at the
        reference batch size (warm-up stays constant in samples; with ``lr_rule='none'``, the
        rate is the script's, and so is its warm-up: ``steps``)."""
        return self._rate.warmup_steps(steps, self.batch_size)

    def steps_for(self, steps: int) -> int:
        """This run's optimizer steps that hold the samples ``steps`` held at the reference
        batch size, rounded down (at least 1; 0 stays 0): for what a loop counts in steps
        tuned at the reference (the steps between evaluations, the run's length, its
        schedule's), so that each report, one of the job's epochs, is the same data at every
        batch size (a loop that asks reports within epochs by design: its first report does
        not say so).

        Raises:
            OperationOrderError: before the run has its batch size.
        """
        if not self._started:
            raise OperationOrderError(
                "call get_batch_size() (a session's start()) before steps_for(): its steps are "
                "of the run's batch size"
            )
        self.reports_within_epochs_said()
        return 0 if steps <= 0 else max(1, steps * self.lr.reference // self.batch_size)

    def train_begin(self, steps_per_epoch: int | None = None) -> None:
        """Training starts now: open the measuring window on every process at once (and, with
        ``power_limit="optimize"``, set the GPUs' limit or start profiling them: an epoch's
        ``steps_per_epoch`` make a profile's epoch of its steps). ``steps_per_epoch``, the
        loop's steps in an epoch (``len(loader)``), also lets the run's first report say where
        it came after part of an epoch (`epoch_steps`).

        Raises:
            ConfigurationError: the run has an ``lr_rule``, but the script's loop scaled no
                optimizer (`scale`) and asked no rate (`learning_rate`): every batch size would
                train at the rate tuned at the reference (the trial is released).
        """
        if not self._began and not self._by_framework and (unscaled := self._rate.unapplied()):
            raise ConfigurationError(unscaled)
        open_window(self._collectives, self.progress)
        if self.server is not None:
            self.server.train_begin()  # starts the heartbeat
        if not self._began:
            self._shared.of_the_run(self._collectives.all_gather(os.getpid()))
            self._loop_steps = steps_per_epoch
            self._power.begin(self._send_power_profile, steps_per_epoch)
            self._first.steps.start()
        self._began = True

    def _send_power_profile(
        self, measurements: list[PowerMeasurement], limit_range_w: tuple[float, float]
    ) -> float | None:
        server = self.server  # the main process's: the others send nothing
        return None if server is None else server.send_power_profile(measurements, limit_range_w)

    def _refuse_trained(self, optimizer: Any) -> None:
        """Before an optimizer's first step in the run: refuse the model of its parameters where
        an earlier run of the job trained it in this process, as that run left it
        (`zeus_bso.training.trained_models`).

        Raises:
            ConfigurationError: that model (the trial is released).
        """
        if refused := trained_here(optimizer, self):
            raise ConfigurationError(refused)

    @override
    def _ending(self, on_main: Callable[[ServerRun], None], *, close: bool = True) -> None:
        for optimizer in self._first.steps.optimizers:  # a later run may not train it so
            remember(optimizer, self)
        super()._ending(on_main, close=close)

    def step_begin(self, batch: Any = None) -> None:
        """Before each training step, on every process (profiles power limits, with
        ``power_limit="optimize"``). Given the step's ``batch``, the first one is checked
        against `micro_batch_size`: a DataLoader of another size would train one size while the
        server charges another (a smaller one is taken where ``train_begin`` was told that an
        epoch has one batch: the data is smaller than the size).

        Raises:
            ConfigurationError: the first batch has another size (the trial is released).
        """
        if batch is not None and not self._batch_checked:
            self._batch_checked = True
            only = self._loop_steps == 1
            check_first_batch(batch, self.micro_batch_size, self.release, only_batch=only)
        self._power.step_begin()

    def step_end(self) -> None:
        """After each training step, on every process (see `step_begin`). The step that ends
        a power profile waits for the server's limit: that wait is left out of the run's time
        and energy, on every process, as a report's is (`_evaluate`)."""
        waiting = self.progress.mark() if self._power.profiling else None
        self.progress.leave_out(waiting, self._power.step_end())

    @property
    def power(self) -> PowerLimitRun | None:
        """This process's GPU power limits (with ``power_limit="optimize"``)."""
        return self._power.limits

    def report(
        self, metric: float | Callable[[], float | None], epoch: int | None = None
    ) -> ReportAnswer:
        """Report the validation metric of the epoch just finished; the answer is truthy when
        training should stop (`ReportAnswer`: also whether it converged, why, and its cost).

        The main process's metric is reported: compute it over the whole validation set (a
        number that differs between processes is said once). A function is called on the main
        process only; its error, like the server's, is raised on every process, and its ``None``
        (not measured at this validation) reports nothing. ``epoch`` (from 1): the run's epochs
        so far, for a loop that validates every few epochs (default: one more than reported)."""
        if not self._began:
            raise OperationOrderError("call train_begin() before report()")
        elapsed, metrics = elapsed_of_the_run(self._collectives, self.progress, metric)
        if self.is_main and not self._apart_said and (apart := metrics_apart(metrics)):
            self._apart_said = True  # once a run
            logger.warning("%s", apart)
        answer = self._evaluate(metric, epoch, elapsed)
        if answer is None:
            return NOT_REPORTED
        return ReportAnswer(
            answer.stop_train, self.converged, answer.reason, answer.why, answer.cost
        )

    def _evaluate(
        self, metric: float | Callable[[], float | None], epoch: int | None, elapsed: Elapsed
    ) -> ReportResponse | None:
        """`report`'s work, given the run's seconds and joules: the server's answer on every
        process (None: the metric was not measured)."""
        shared = self._collectives.all_gather(self._shared.found())  # each process's GPUs
        if self.is_main:
            self._shared.say(shared, self.batch_size)
            self._main().shared_gpus = tuple(self._shared.said)

        def send() -> tuple[ReportResponse, int, float] | None:
            value = metric() if callable(metric) else metric
            if value is None:
                return None
            server = self._main()
            first, reported, steps = self._first, server.progress.epochs, self.epoch_steps()
            # A loop that stepped at every micro-batch took steps: never also untrained.
            if refused := size_changes.refusal(self._size_changes) or (
                None
                if self._by_framework
                else first.unaccumulated(
                    reported, epoch, steps, self.accumulation_steps, self.micro_batch_size
                )
            ):
                server.progress.epoch_done(epoch)  # it trained this far: its line says so
                self.release(refused)
                raise ConfigurationError(refused)
            first.untrained(reported)
            first.part_of_an_epoch(reported, epoch, steps, self._job.max_epochs)
            if server.model_parameters is None:
                server.model_parameters = trained_parameters(first.steps.optimizers)
            server.precision, server.techniques = self.precision, self.techniques
            answer = server.on_evaluate(float(value), epoch, elapsed)
            return answer, server.progress.epochs, server.waited

        waiting = self.progress.mark()
        sent = from_rank_zero(self._collectives.broadcast, self.is_main, send)
        if sent is None:  # not measured at this validation: nothing reported
            return None
        answer, reported_epoch, waited = sent
        self.progress.leave_out(waiting, waited)  # on every process: the server's, not training
        self.converged = answer.stop_train and answer.converged
        self.stopped = self.stopped or answer.stop_train
        values: dict[str, float] = {
            "bso/batch_size": float(self.batch_size),
            "bso/energy_j": elapsed.joules,
        }
        if answer.cost is not None:  # the server's figure (none while it is unreachable)
            values["bso/cost"] = answer.cost
        rate = self._rate.stepped()
        if rate is not None:
            values["bso/lr"] = rate
        self.last = values
        self._log(values, reported_epoch)
        if self.stopped and not self.converged and self._raise_from_report:
            self.end()  # raises with raise_if_unconverged, as upstream Zeus's on_evaluate does
        return answer

    def epoch_steps(self) -> int | None:
        """The optimizer steps of one of the loop's epochs, where they are known: the steps
        given to `train_begin` (a DataLoader's batches: over the micro-batches a step where the
        run accumulates); None: not known."""
        steps = self._loop_steps
        if steps is None or steps <= 0:
            return None
        return -(-steps // self.accumulation_steps)

    def reports_within_epochs_said(self) -> None:
        """The adapter said, from the loop's settings, that it reports within epochs (each
        report an epoch of the job's): the run's first report does not say it again."""
        self._first.part_said = True

    def checkpoint(self) -> dict[str, Any]:
        """What to save with a checkpoint to continue this trial after a restart (main process;
        {} elsewhere). Pass it back as ``resume=``."""
        saved = {} if self.server is None else self.server.checkpoint()
        if saved:
            saved[LR_FACTOR_KEY] = self._rate.saved_factor()
        return saved
