"""``ZeusBSOTrainerCallback`` for the Hugging Face ``Trainer``::

    callback = ZeusBSOTrainerCallback(server_url=..., job=JobSpec(...), metric="eval_accuracy")
    Trainer(model, TrainingArguments(..., eval_strategy="epoch"), ..., callbacks=[callback]).train()

As the Trainer is built, the callback asks the server for the run's batch size and sets it on
the arguments and the Trainer (`start`, which a script may call first to build them at it).

The Trainer calls no callback when ``train()`` raises: in a process that goes on after the
error (a worker, a service, a notebook), ``with callback:`` around the training ends the run by
it (`ZeusBSOTrainerCallback._block_ended`).

Every checkpoint gets a ``zeus_bso_trial.json``: a run given the checkpoint
(``resume_from_checkpoint``, or ``True`` with ``output_dir``: the last checkpoint there, as
``Trainer.train`` takes it) continues its trial, as does one whose arguments name it, or whose
``output_dir`` holds it last, its trial still open
(`zeus_bso.integrations.hf_checkpoints.Resumption`). What the callback adds to the Trainer's logs
and metrics: `zeus_bso.integrations.hf_logs`; a run with ``auto_find_batch_size=True`` at a
smaller size: `zeus_bso.integrations.shrunk_run`. The trial in every process (the server, the
answers shared across ranks, each GPU's energy once, checkpoints) is
`zeus_bso.training.session.TrialSession`'s; this module maps the Trainer's events onto it.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from typing_extensions import Unpack, override

from zeus_bso.errors import BatchSizeDoesNotFitError, ConfigurationError, OperationOrderError
from zeus_bso.integrations import hf_arguments, hf_cadence, hf_unheard
from zeus_bso.integrations.hf_callback_order import calling_trainer, run_first
from zeus_bso.integrations.hf_checkpoints import Resumption
from zeus_bso.integrations.hf_ending import end_training
from zeus_bso.integrations.hf_eval_sets import EvaluationRound
from zeus_bso.integrations.hf_logs import log_report, log_stepped_rate
from zeus_bso.integrations.hf_memory import check_memory
from zeus_bso.integrations.shrunk_run import ShrunkRun
from zeus_bso.lazy import require
from zeus_bso.options import JobLike, check_memory_check_steps, check_name
from zeus_bso.training import RunOutcome, TrialSession, evaluation_code, trained_models
from zeus_bso.training.collectives import is_rank_zero
from zeus_bso.training.session_options import RunOptions, SessionOptions, callback_arguments
from zeus_bso.training.techniques import techniques_of
from zeus_bso.training.trial_file import write_trial
from zeus_bso.training.with_block import WithBlock

logger = logging.getLogger(__name__)

require("transformers", "ZeusBSOTrainerCallback needs transformers", "hf")
from transformers import (  # noqa: E402 (after the install hint)
    EarlyStoppingCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)


class ZeusBSOTrainerCallback(TrainerCallback, WithBlock):
    """Chooses the batch size of a Hugging Face training run and stops it when told.

    Args:
        server_url: the zeus-bso server (default: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (its ``job_id`` may be
            left out: see `BatchSizeOptimizer`).
        metric: the evaluation metric to report (a key of the Trainer's metrics; its
            ``eval_`` prefix may be left out, as in ``metric_for_best_model``).
        resume_from_checkpoint: a checkpoint directory of an earlier, interrupted run of this
            trial: the run continues that trial (and its batch size). ``True``: the last
            checkpoint in ``output_dir`` (the Trainer's convention). None: as the Trainer is
            built, the one its arguments name (``resume_from_checkpoint``), else the last in
            their ``output_dir`` where its trial is still open (`Resumption`). False: a new
            trial.
        output_dir: the Trainer's ``output_dir``, where ``resume_from_checkpoint=True`` looks.
        memory_check_steps: at a batch size that never ran on these GPUs, this many training
            steps are tried (and undone) on every process when training starts; if one runs
            out of memory, the size is marked ``infeasible`` on these GPUs and
            `BatchSizeDoesNotFitError` is raised on every process before the run trains (the
            Trainer cannot change its batch size: `until_converged` starts the next run, which
            gets a size that fits); with ``auto_find_batch_size=True``, an out-of-memory error,
            at which the Trainer shrinks the batch (see
            `zeus_bso.integrations.shrunk_run.ShrunkRun`). 0: no check.
        options: `zeus_bso.training.RunOptions`, passed on to the run's session.
            ``raise_if_unconverged``: ``trainer.train()`` raises `ZeusBSOTrainFailError` at its
            end when the run did not reach its target. With ``lr_rule``, the Trainer's
            optimizer and its schedule, built at ``TrainingArguments.learning_rate`` tuned at
            ``reference_batch_size`` (per device), are scaled when training starts (not again
            when the run resumes from a checkpoint); a fixed ``warmup_steps``, tuned there
            too, is set to the steps that keep its samples (`hf_cadence.ReferenceSteps`). With
            ``max_micro_batch_size``, a batch size above it trains as
            ``callback.accumulation_steps`` micro-batches of ``callback.start()`` samples (pass
            both to ``TrainingArguments``).
    """

    def __init__(
        self,
        server_url: str | None = None,
        job: JobLike | None = None,
        metric: str = "eval_accuracy",
        *,
        resume_from_checkpoint: str | os.PathLike[str] | bool | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        memory_check_steps: int = 3,
        **options: Unpack[RunOptions],
    ) -> None:
        self.resumption = Resumption(resume_from_checkpoint, output_dir)
        # As the Trainer reads metric_for_best_model: its evaluations' keys start with "eval_".
        check_name(metric, "metric", "an evaluation metric", "eval_accuracy")
        self.metric = metric if metric.startswith("eval_") else f"eval_{metric}"
        self.server_url, self.job, checked = callback_arguments(
            server_url, job, self.metric, options, ZeusBSOTrainerCallback.__init__
        )  # no network: a clear error now
        self.options = SessionOptions(**checked, resume=self.resumption.option())
        """What the run's `zeus_bso.training.TrialSession` is given."""
        self.memory_check_steps = check_memory_check_steps(memory_check_steps)
        self.outcome: RunOutcome | None = None
        """How the run ended (the world process zero, after ``trainer.train()``)."""
        self.session: TrialSession | None = None
        """This run's trial in this process (`zeus_bso.training.TrialSession`), from `start`
        on."""
        self._ended = False
        self._training = False
        self._reported_step: int | None = None
        self._round = EvaluationRound(self.metric)  # an eval_dataset dict's datasets
        self._model: weakref.ref[Any] | None = None  # the model the run trains
        self._shrunk = ShrunkRun(self.job, self.metric, "the Trainer", logger)  # auto_find's sizes
        self._steps = hf_cadence.ReferenceSteps()  # max_steps, warmup_steps
        # The Trainer's EarlyStoppingCallbacks (None: its callbacks were not found).
        self._stoppers: list[Any] | None = None
        # Why the batch size was not set when the Trainer was built (`on_init_end`).
        self._not_set = (
            "this Trainer was built without it (add_callback adds it after; "
            "callback.attach(trainer) adds it and sets the size)"
        )

    def start(self) -> int:
        """Register the job and get this run's trial from the server (or continue the
        checkpoint's), on the world process zero, and share it with every process: returns the
        run's per-device batch size, for ``TrainingArguments(per_device_train_batch_size=...)``
        (with ``max_micro_batch_size``, the micro-batch: pass
        ``gradient_accumulation_steps=callback.accumulation_steps`` too).

        A Trainer built with the callback among its ``callbacks`` has it called as it is built,
        and the size set on its arguments (the script's own ``per_device_train_batch_size`` is
        replaced, and logged). Call it yourself to build the arguments at the run's size: where
        something reads the size as they are built (DeepSpeed's configuration, TRL's GRPO),
        or to size things of the script's own from it. Every process calls it, before the
        Trainer is built; in a distributed run, once ``torch.distributed`` is initialised (e.g.
        ``accelerate.PartialState()``). A second call returns the same batch size."""
        return self._opened().micro_batch_size

    def _opened(self) -> TrialSession:
        """The run's session (`start`), opened where it is not yet."""
        if self.session is None:
            for other, error in hf_unheard.unheard(self):  # runs whose train() raised unheard
                other._end_unheard(error)
            self.session = TrialSession(
                is_rank_zero(
                    "initialise torch.distributed (e.g. accelerate.PartialState()) before "
                    "callback.start()"
                ),
                lambda values, step: None,  # into the evaluation's metrics (_report)
                self.server_url,
                self.job,
                **self.options,
                raise_from_report=False,  # at the end of training, after its checkpoints
                by_framework=True,  # the callback scales, the Trainer accumulates
            )
        return self.session

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches an optimizer step, for ``TrainingArguments(gradient_accumulation_steps=
        ...)`` (after `start`; 1 without ``max_micro_batch_size``)."""
        if self.session is None:
            raise OperationOrderError("call callback.start() before reading accumulation_steps")
        return self.session.accumulation_steps

    @property
    def batch_size(self) -> int:
        """This run's per-device batch size (after `start`)."""
        if self.session is None:
            raise OperationOrderError(
                "call callback.start() (or build the Trainer with the callback) before reading "
                "callback.batch_size: it registers the job and asks for this run's batch size"
            )
        return self.session.batch_size

    def _block_ended(self, error: BaseException | None) -> None:
        """End a run that the ``with callback:`` block leaves open (`WithBlock`): the Trainer
        calls no callback when ``trainer.train()`` raises, and in a process that goes on (a
        worker, a notebook) its heartbeat would keep the trial in flight. The error ends it as
        an exit would judge it (out of memory: infeasible here; an interruption, or an error
        before the first report: released; any other: failed); no error, before the run
        trained: released."""
        self._end_open(
            error,
            lambda session: session.release(
                "the callback's with block ended before trainer.train() ended the run"
            ),
        )

    def _end_unheard(self, error: BaseException | None) -> None:
        """End this run, whose ``trainer.train()`` ended without a word to the callback
        (`zeus_bso.integrations.hf_unheard`): by ``error`` where it is known, as `_block_ended`
        would, else as interrupted."""
        session = self.session
        if session is None or self._ended:
            return
        if session.is_main:
            logger.warning(
                "zeus-bso: trial %s of job %s was still open: its trainer.train() ended "
                "without a word to the callback (the Trainer calls no callback on an error), "
                "and a new run starts; it ends now%s. Where a process goes on after a failed "
                "train(), put `with callback:` around the training",
                session.trial_number,
                session.job_id,
                f", by {type(error).__name__}" if error is not None else ", as interrupted",
            )
        self._end_open(
            error,
            lambda session: session.end_interrupted(
                "its trainer.train() ended without a word to the callback"
            ),
        )

    def _end_open(
        self, error: BaseException | None, otherwise: Callable[[TrialSession], None]
    ) -> None:
        """End a run that ``trainer.train()`` left open: by ``error`` (`TrialSession.failed`,
        as an exit judges it), else by ``otherwise``; its model remembered as trained."""
        session = self.session
        if session is None or self._ended:
            return
        self._ended, self._training = True, False
        hf_unheard.ended(self)
        try:
            if error is not None:
                session.failed(error, trained=session.progress.epochs > 0)
            else:
                otherwise(session)
        finally:
            self.outcome = session.outcome
        self._remember_trained(session)

    def _remember_trained(self, session: TrialSession) -> None:
        """The run trained its model (`trained_models.remember`): a later run of the job may
        not train it as it is left."""
        if self._model is not None and (model := self._model()) is not None:
            trained_models.remember(model, session)

    @property
    def trial_number(self) -> int | None:
        """The server's trial number for this run (after `start`)."""
        return self.session.trial_number if self.session is not None else None

    @property
    def job_id(self) -> str | None:
        """The job this run is a recurrence of (after `start`)."""
        return self.session.job_id if self.session is not None else None

    @override
    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.session is None or not self.session.is_main:
            return
        saved = self.session.checkpoint()
        if saved:
            write_trial(Path(args.output_dir or ".") / f"checkpoint-{state.global_step}", saved)

    @override
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        run_first(self)
        self._take_size(args, calling_trainer())

    def attach(self, trainer: Any) -> None:
        """Add the callback to ``trainer``, built without it (by a library, in an earlier
        notebook cell), and set the run's batch size on it as on a Trainer built with it
        (``add_callback`` alone leaves its arguments' size, and ``train()`` is refused)."""
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        self._take_size(trainer.args, trainer)

    def _take_size(self, args: TrainingArguments, trainer: Any) -> None:
        """Set the run's batch size on ``trainer`` and its ``args`` (`start`), and refuse
        training data that holds no batch of it."""
        if trainer is not None and not (self._training or self._ended):
            # `start` here, unless what read the arguments' size as they were built keeps it.
            self._not_set = hf_arguments.set_by_hand(args, trainer) or ""
            if not self._not_set:
                if self.session is None:  # the checkpoint the arguments resume, if any
                    self.options["resume"] = self.resumption.look(args)
                    self.resumption.took(self._opened())
                session = self._opened()
                accumulates = self.options.get("max_micro_batch_size") is not None
                steps = session.accumulation_steps if accumulates else None
                said = hf_arguments.take_batch_size(args, trainer, session.micro_batch_size, steps)
                for words in (said, *self._steps.keep(args, session)):  # kept in samples
                    if words and session.is_main:
                        logger.info("zeus-bso: %s", words)
        if self.session is not None and trainer is not None:
            size, accumulates = self.session.micro_batch_size, self.session.accumulation_steps > 1
            if refused := hf_arguments.no_batches(args, trainer.train_dataset, size, accumulates):
                self._refuse(refused)  # before HF's own error at train(), which says less

    @override
    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        **kwargs: Any,
    ) -> None:
        callbacks = run_first(self)  # also when added after the Trainer was built (add_callback)
        if callbacks is not None:
            self._stoppers = [c for c in callbacks if isinstance(c, EarlyStoppingCallback)]
        session = self._startable(args, state)
        if args.auto_find_batch_size and (before := self._shrunk.shrank(state.train_batch_size)):
            if control.should_evaluate:  # it ran out in evaluation (its due flag is still up)
                self._refuse(hf_arguments.evaluation_ran_out(args))
            # After an out-of-memory error the Trainer trains again at a smaller size: the run
            # goes on outside the optimizer (`zeus_bso.integrations.shrunk_run.ShrunkRun`).
            self._training, ended, self._ended = False, self._ended, True
            devices = max(1, args.n_gpu)
            old, new = before // devices, state.train_batch_size // devices
            why = (
                f"the Trainer's auto_find_batch_size caught an out-of-memory error at batch size "
                f"{old} and trains at {new}"
            )
            self._shrunk.went_on(session, ended, old, new, why)
            if session.lr.rule != "none" and optimizer is not None:
                session.lr.rescale(optimizer, new, [lr_scheduler])
            self.outcome = self.outcome if ended else session.outcome
            return
        loader = kwargs.get("train_dataloader")
        self._check_arguments(session, args, state, loader)
        session.precision = hf_arguments.precision(args)
        session.techniques = techniques_of(model, compiled=bool(args.torch_compile))
        resumed = self.resumption.path is not None
        if not resumed and (refused := trained_models.trained_here(model, session)):
            self._refuse(refused)
        reference = self.options.get("reference_batch_size") or self.job.default_batch_size
        if refused := hf_arguments.schedule_refused(
            args, state, lr_scheduler, session.batch_size, reference, self.job.max_epochs
        ):
            self._refuse(refused)
        if self.memory_check_steps > 0 and not resumed and None not in (model, optimizer, loader):
            alone = args.world_size == 1  # its loss's collectives are not the check's
            trainer = calling_trainer() if alone else None
            self._check_memory(session, args, model, optimizer, loader, trainer)
        if session.lr.rule != "none" and optimizer is not None:
            session.scale(optimizer, lr_scheduler)  # a resumed run keeps its factor
        self._training = True
        hf_unheard.began(self)
        _name_evaluation()
        self._model = weakref.ref(model) if model is not None else None
        self._reported_step = state.global_step  # an evaluation here (eval_on_start) trained none
        epochs = max(1.0, float(args.num_train_epochs))
        per_epoch = (
            int(state.max_steps / epochs) if state.max_steps and args.max_steps <= 0 else None
        )
        session.train_begin(per_epoch)  # on every rank at once; the heartbeat on rank 0

    def _startable(self, args: TrainingArguments, state: TrainerState) -> TrialSession:
        """The run's session, where training can start with it; otherwise the refusal (the
        trial released)."""
        if self.session is None:
            raise ConfigurationError(
                "the callback sets the run's batch size as the Trainer is built (given in "
                f"Trainer(callbacks=[...])), but {self._not_set}: call callback.start() before "
                "building TrainingArguments, and pass per_device_train_batch_size=callback."
                "start() (or set training_args.per_device_train_batch_size = callback.start() "
                "before the Trainer is built)"
            )
        if state.is_hyper_param_search:
            self._refuse(hf_arguments.SEARCH_REFUSED)
        return self.session

    def _check_arguments(
        self, session: TrialSession, args: TrainingArguments, state: TrainerState, loader: Any
    ) -> None:
        """Refuse a second ``trainer.train()``, a checkpoint that is not the run's and
        arguments that would train another batch size than the run's; warn of those that
        would count its epochs wrongly."""
        if self._ended:  # trainer.train() again, after the run ended
            raise OperationOrderError(
                f"this callback's run ended (trial {session.trial_number} of job "
                f"{session.job_id}): trainer.train() again would train outside the "
                "optimizer; for the next run, give a new ZeusBSOTrainerCallback to a new Trainer"
            )
        refused = self.resumption.refused(state.global_step, session) or hf_arguments.refusal(
            args,
            micro_batch_size=session.micro_batch_size,
            batch_size=self.batch_size,
            accumulation_steps=session.accumulation_steps,
            accumulates=self.options.get("max_micro_batch_size") is not None,
            metric=self.metric,
            evaluates_itself=hf_arguments.evaluates_itself(calling_trainer()),
        )
        if refused is None and loader is not None:
            trainers = state.train_batch_size
            refused = hf_arguments.loader_refusal(loader, args, session.batch_size, trainers)
        if refused is not None:
            self._refuse(refused)
        kept = hf_cadence.keep_samples(args, state, session)  # every rank evaluates alike
        if session.is_main:  # a dataset without a length has no epochs
            hf_arguments.warn(args, self.job.max_epochs, loader, max_steps=self._steps.given)
            if kept:
                logger.info("zeus-bso: %s", kept)
            if said := hf_cadence.evaluations_below(args, state, self.job.max_epochs):
                logger.warning("%s", said)
        if hf_arguments.by_steps(args):  # it said so, or has no epochs
            session.reports_within_epochs_said()

    def _check_memory(
        self,
        session: TrialSession,
        args: TrainingArguments,
        model: Any,
        optimizer: Any,
        loader: Any,
        trainer: Any,
    ) -> None:
        """`zeus_bso.integrations.hf_memory.check_memory`; with ``auto_find_batch_size``, a
        size that does not fit raises the out-of-memory error at which the Trainer shrinks the
        batch."""
        try:
            check_memory(session, args, model, optimizer, loader, trainer, self.memory_check_steps)
        except BatchSizeDoesNotFitError as err:
            self._ended, self.outcome = True, session.outcome
            if args.auto_find_batch_size:  # in words the Trainer shrinks the batch at
                raise RuntimeError(f"zeus-bso: {err}. out of memory.") from err
            raise

    @override
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self._training and self.session is not None:
            self._round_ended()
            self.session.step_begin()

    @override
    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self._training and self.session is not None:
            self.session.step_end()

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
        # (`run_first`), so the cost it adds reaches every integration after it.
        if not self._training or self.session is None or not logs:
            return
        log_stepped_rate(state, logs, self.session.lr_factor)
        if self.metric not in logs or self._reported_step == state.global_step:
            return  # not an evaluation; or reported at this step already, or no step trained
        self._report(args, state, control, logs)

    @override
    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        if self._shrunk.size is not None and metrics:
            main = self.session is not None and self.session.is_main
            stop, self.outcome = self._shrunk.judge(metrics, self.outcome, main)
            control.should_training_stop |= stop
        if not self._training or self.session is None:
            return  # an evaluation outside of training, or of the optimizer
        if self._reported_step == state.global_step:
            return  # reported from its logs
        metrics = metrics if metrics is not None else {}
        if self._round.waits(state.global_step, metrics):
            return  # one of several datasets: the metric is another's, evaluated next
        self._report(args, state, control, metrics)  # raises on every rank without the metric

    def _release(self, why: str) -> None:
        """Release the trial: a misconfiguration is not its batch size's fault."""
        session = self.session
        if session is not None and not self._ended:
            self._ended = True
            session.release(why)
            self.outcome = session.outcome

    def _refuse(self, message: str) -> NoReturn:
        """Release the trial and raise ``message`` as a `ConfigurationError`."""
        self._release(message)
        raise ConfigurationError(message)

    def _report(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float],
    ) -> None:
        assert self.session is not None
        self._reported_step = state.global_step

        def metric() -> float:  # on the world process zero; its error reaches every process
            if self.metric not in metrics:
                raise self._no_metric(metrics)
            return float(metrics[self.metric])

        try:
            stop = self.session.report(metric, epoch=hf_arguments.epochs_trained(args, state))
        except ConfigurationError as err:
            self._release(str(err))
            raise
        log_report(state, metrics, self.session.last, self.session.is_main)
        control.should_training_stop |= bool(stop)

    def _no_metric(self, metrics: dict[str, float]) -> ConfigurationError:
        return ConfigurationError(
            f"metric '{self.metric}' is not among the evaluation metrics {sorted(metrics)}; "
            f"pass metric=... naming one of them{hf_arguments.loss_alone(metrics, self.metric)}"
        )

    def _round_ended(self) -> None:
        """Raise where the last evaluation's datasets ended without the metric (`_no_metric`,
        naming all their metrics), the trial released."""
        if (metrics := self._round.unreported(self._reported_step)) is not None:
            error = self._no_metric(metrics)
            self._release(str(error))
            raise error

    @override
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self._training and self.session is not None:
            self._round_ended()
        self._training = False
        self._shrunk.size = None
        hf_unheard.ended(self)
        session = self.session
        if session is None or self._ended:
            return
        self._ended = True
        try:
            end_training(session, (args, state, control), self._stoppers, self.job.max_epochs)
        finally:
            self.outcome = session.outcome
        self._remember_trained(session)


@functools.cache
def _name_evaluation() -> None:
    """Name the Trainer's evaluation to the session (`evaluation_code`): out of memory raised
    through it, at ``per_device_eval_batch_size`` and with what evaluation gathers on the GPU,
    is not the training batch size's (a subclass's ``evaluate`` calls the Trainer's; the
    Trainer's ``_evaluate`` raises its own error over one under ``auto_find_batch_size``).
    Once a process."""
    from transformers import Trainer

    names = ("_evaluate", "evaluate", "evaluation_loop", "prediction_loop")
    evaluation_code(*(function.__code__ for n in names if (function := getattr(Trainer, n, None))))
