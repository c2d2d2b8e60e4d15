"""``ElasticBatchSize``: grow the batch size as training goes, and scale the learning rate.

A plain PyTorch loop::

    ebs = ElasticBatchSize(initial_batch_size=64, max_batch_size=1024, local_bsz_bounds=(32, 256))
    ebs.attach(optimizer)                        # wraps optimizer.step
    schedule = ebs.follow(OneCycleLR(optimizer, 0.1, total_steps=epochs * len(data) // 64))
    for epoch in range(epochs):
        loader = DataLoader(data, batch_size=ebs.get_local_bsz(), shuffle=True)
        for i, (x, y) in enumerate(loader):
            with ebs.timed_microbatch(len(x)):
                (loss_fn(model(x), y) / ebs.accumulation_steps).backward()
            ebs.record_microbatch(model.parameters())
            if (i + 1) % ebs.accumulation_steps == 0:
                optimizer.step()                 # lr scaled by the rule, then restored
                optimizer.zero_grad()
                schedule.step()                  # by what the step was worth (follow)

Each optimizer step accumulates at least two micro-batches, so the gradient noise is measured
in a single process too (for models without batch normalisation, two micro-batches of b/2 are
the same step as one batch of b). The batch size changes only when ``get_local_bsz`` is called,
at an epoch boundary, only when the predicted goodput gain passes ``threshold``, and by at most
``max_change`` (x2 by default) at a time.

With several replicas (DistributedDataParallel), pass the DDP model to ``attach``: each
replica's own gradient is read in a DDP communication hook before the all-reduce, and the
replicas' gradients give the noise (no accumulation needed, ``min_accumulation`` may be 1)::

    model = DistributedDataParallel(model)
    ebs = ElasticBatchSize(64, max_batch_size=4096, local_bsz_bounds=(32, 256), min_accumulation=1)
    ebs.attach(optimizer, ddp_model=model)      # before the first backward
    ...
            last = (i + 1) % ebs.accumulation_steps == 0
            with contextlib.nullcontext() if last else model.no_sync():  # one all-reduce a step
                (loss_fn(model(x), y) / ebs.accumulation_steps).backward()

Every rank then holds the same noise estimate, and ``get_local_bsz`` returns rank 0's choice on
every rank (one broadcast), whatever each rank measured of its own speed. The mean gradient is
read from DDP's buckets at the step, so anything that changes the gradients between backward and
step in place on the buckets (``gradient_as_bucket_view=True`` with clipping or fp16 loss-scale
unscaling) skews the estimate; DDP's default copies them.
"""

from __future__ import annotations

import logging
import math
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from zeus_bso.elastic.goodput import Choice, ThroughputModel, best_choice, candidates
from zeus_bso.elastic.loader_check import MicroBatchSizes
from zeus_bso.elastic.lr import LrRule, lr_factor
from zeus_bso.elastic.microbatches import MicroBatchGradients
from zeus_bso.elastic.noise import GradientNoiseEstimator
from zeus_bso.elastic.pickling import WithoutWeakSets
from zeus_bso.elastic.replicas import ReplicaGradients
from zeus_bso.elastic.schedules import (
    FollowedSchedule,
    Progress,
    UnfollowedSchedule,
    follow,
    step_worth,
)
from zeus_bso.elastic.timing import MicroBatchTimer
from zeus_bso.errors import ConfigurationError, ZeusBSOError
from zeus_bso.training import clean_exit, size_changes
from zeus_bso.training.collectives import broadcast_object, torch_distributed

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install torch"


class ElasticBatchSize(WithoutWeakSets):
    """Gradient-noise-driven batch size with learning-rate scaling (after AdaptDL)."""

    weak_sets = ("_attached",)  # pickled without the optimizers it wrapped in this process

    def __init__(
        self,
        initial_batch_size: int,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int, int] | None = None,
        lr_rule: LrRule = "adascale",
        *,
        replicas: int = 1,
        min_accumulation: int = 2,
        threshold: float = 0.05,
        smoothing: float = 0.9,
        max_change: float = 2.0,
    ) -> None:
        if initial_batch_size <= 0:
            raise ConfigurationError("initial_batch_size must be positive")
        if max_batch_size is not None and max_batch_size < initial_batch_size:
            raise ConfigurationError("max_batch_size must be at least initial_batch_size")
        if local_bsz_bounds is not None and not 0 < local_bsz_bounds[0] <= local_bsz_bounds[1]:
            raise ConfigurationError("local_bsz_bounds must be (low, high) with 0 < low <= high")
        if lr_rule not in ("adascale", "sqrt", "linear", "none"):
            raise ConfigurationError(
                f"lr_rule must be adascale, sqrt, linear or none, not {lr_rule!r}"
            )
        if replicas < 1:
            raise ConfigurationError("replicas must be at least 1")
        if max_change <= 1.0:
            raise ConfigurationError(
                "max_change must be above 1 (the largest factor of one change)"
            )
        self.initial_batch_size = initial_batch_size
        self.max_batch_size = max_batch_size
        self.local_bsz_bounds = local_bsz_bounds
        self.lr_rule: LrRule = lr_rule
        self.replicas = replicas
        self.min_accumulation = max(1, min_accumulation)
        self.threshold = threshold
        self.max_change = max_change
        self.noise = GradientNoiseEstimator(smoothing)
        self.throughput = ThroughputModel()
        self.timer = MicroBatchTimer()
        """Times the micro-batches for `throughput` (on a GPU, read at each decision)."""
        self.progress = 0.0
        """Training progress in scale-invariant steps: the sum of each step's gain."""
        self.schedule_progress = Progress()
        """The optimizer steps so far and their worth in steps of the initial batch size, by
        which the schedules that `follow` wraps are stepped."""
        self._step_samples = 0
        self._sizes = MicroBatchSizes()
        self.choice = self._initial_choice()
        self._micro = MicroBatchGradients()
        self._ddp = False
        """Set by attach(ddp_model=...): the replicas' gradients give the noise."""
        self._replicas = ReplicaGradients()
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        """The optimizers `attach` wrapped: attached again, one is left as it is."""
        self._stepped: tuple[float, Any] | None = None
        """The factor the last optimizer step took, and the rate of its first group (a
        tensor where the optimizer takes its rate as one: read when `metrics` is asked)."""
        self.check_schedules = True
        """Whether to warn of a rate that changes from step to step within an epoch, once the
        batch has grown, where no schedule is followed (`follow`): a schedule stepped each
        optimizer step that falls behind. `ElasticBatchSizeCallback` turns it off: it follows
        the fit's schedules itself, or steps them as written where the fit ends after so many
        steps."""
        self._pace = UnfollowedSchedule()
        self.show: Callable[[str], None] | None = None
        """Where a new batch size is said (`ElasticBatchSizeCallback` sets Lightning's console);
        None: the ``zeus_bso.elastic`` logger, at INFO. On the first process alone."""
        self._decided_at: int | None = None
        """The optimizer steps when `get_local_bsz` last decided (None: it has not)."""
        self.data_bound: int | None = None
        """The samples an epoch gives each process: no optimizer step may take more
        (`ElasticBatchSizeCallback` sets it from its DataLoader); None: no bound."""

    def _initial_choice(self) -> Choice:
        accumulation = self.min_accumulation
        local = max(1, self.initial_batch_size // (accumulation * self.replicas))
        if self.local_bsz_bounds is not None:
            low, high = self.local_bsz_bounds
            local = min(max(local, low), high)
        return Choice(local, accumulation, self.replicas)

    # -- what the training loop asks -----------------------------------------------------------

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        return self.choice.accumulation

    @property
    def scale(self) -> float:
        """Current global batch / initial batch size."""
        return self.choice.global_batch / self.initial_batch_size

    def get_local_bsz(self) -> int:
        """The micro-batch size for the coming epoch (call it at the start of every epoch, on
        every rank: with several processes, every rank gets rank 0's choice). Asked again
        before an optimizer step, it answers the same: a decision needs the steps since the
        last (a loop that asks twice an epoch, to build its DataLoader and to log, trained one
        size and measured the noise and scaled the rate for another)."""
        self._pace.epoch_starts()
        self._sizes.epoch_starts()
        self.timer.read(self.throughput)  # the device's times of the epoch's micro-batches
        if self._decided_at == self.schedule_progress.steps:
            return self.choice.local_bsz
        self._decided_at = self.schedule_progress.steps
        current_batch = self.choice.global_batch
        options = [
            c
            for c in self._candidates()
            # Damping: estimates are noisy early on, so one decision moves by a bounded factor.
            if current_batch / self.max_change <= c.global_batch <= current_batch * self.max_change
        ]
        best = best_choice(
            options,
            self.throughput,
            lambda scale: self.predict_gain(scale),
            self.initial_batch_size,
        )
        if best is not None:
            choice, goodput = best
            current = self._goodput(self.choice)
            if current is None or goodput > current * (1.0 + self.threshold):
                self.choice = choice
        elif self.noise.sqr is not None:
            self._explore()
        self.choice = _same_on_every_rank(self.choice)
        if self.choice.global_batch != current_batch:
            gain = self.predict_gain(self.scale)
            _say_change(current_batch, self.choice, gain, self.scale, self.show)
        return self.choice.local_bsz

    def _candidates(self) -> list[Choice]:
        """Every configuration on `replicas` processes within the bounds (`candidates`) whose
        optimizer step the data holds (`data_bound`)."""
        found = candidates(
            self.initial_batch_size,
            self.max_batch_size,
            self.local_bsz_bounds,
            self.replicas,
            self.min_accumulation,
        )
        bound = self.data_bound
        return [c for c in found if bound is None or c.local_bsz * c.accumulation <= bound]

    def _spread(self, global_batch: int) -> Choice:
        """The configuration on `replicas` processes within the bounds whose global batch is
        nearest ``global_batch`` (the fewest micro-batches of those)."""
        options = self._candidates()
        if not options:
            local = max(1, global_batch // (self.min_accumulation * self.replicas))
            return Choice(local, self.min_accumulation, self.replicas)
        return min(
            options,
            key=lambda c: (abs(math.log(c.global_batch / global_batch)), c.accumulation),
        )

    def _explore(self) -> None:
        # One measured micro-batch size fits no throughput model: try twice the micro-batch
        # for an epoch, if the bounds allow it and the noise says a larger batch still pays.
        doubled = Choice(self.choice.local_bsz * 2, self.choice.accumulation, self.replicas)
        high = self.local_bsz_bounds[1] if self.local_bsz_bounds else None
        limit = self.max_batch_size or self.initial_batch_size * 16
        if (high is not None and doubled.local_bsz > high) or doubled.global_batch > limit:
            return
        scale = doubled.global_batch / self.initial_batch_size
        if self.predict_gain(scale) / scale >= 0.5:
            self.choice = doubled

    def _goodput(self, choice: Choice) -> float | None:
        rate = self.throughput.samples_per_second(choice)
        if rate is None:
            return None
        scale = choice.global_batch / self.initial_batch_size
        return rate * self.predict_gain(scale) / scale

    def predict_gain(self, scale: float) -> float:
        """Statistical gain of a global batch ``scale`` times the initial one (in [1, scale])."""
        return self.noise.gain(scale, self.initial_batch_size)

    def metrics(self) -> dict[str, float]:
        """Where the elastic batch size stands, for a training's loggers (AdaptDL writes the
        same to TensorBoard; `ElasticBatchSizeCallback` logs them to the Trainer's loggers):

        - ``elastic/batch_size``: the global batch of an optimizer step;
        - ``elastic/local_batch_size``: a micro-batch of one process;
        - ``elastic/accumulation``: the micro-batches of a step;
        - ``elastic/scale``: the global batch over the initial one;
        - ``elastic/gain``: the statistical gain of that scale (`predict_gain`);
        - ``elastic/progress``: the training's scale-invariant steps (the sum of their gains);
        - ``elastic/noise_scale``, once measured: the gradient noise scale, the batch size
          around which a larger batch stops paying off (per-sample variance over the squared
          gradient);
        - ``elastic/lr_factor`` and ``elastic/lr``, after an optimizer step: the factor by
          which the rule scaled that step's rate, and the rate its first parameter group took
          (the schedule's rate, which ``LearningRateMonitor`` logs, times the factor).
        """
        values = {
            "elastic/batch_size": float(self.choice.global_batch),
            "elastic/local_batch_size": float(self.choice.local_bsz),
            "elastic/accumulation": float(self.choice.accumulation),
            "elastic/scale": self.scale,
            "elastic/gain": self.predict_gain(self.scale),
            "elastic/progress": self.progress,
        }
        if (noise_scale := self.noise.noise_scale()) is not None:
            values["elastic/noise_scale"] = noise_scale
        if self._stepped is not None:
            factor, rate = self._stepped
            values["elastic/lr_factor"], values["elastic/lr"] = factor, float(rate)
        return values

    def update_scale(self, scale: float, replicas: int | None = None) -> None:
        """Set the global batch to ``scale`` x the initial one (e.g. after a rescale elsewhere)."""
        if replicas is not None:
            self.replicas = replicas
        self._pace.epoch_starts()  # as at get_local_bsz
        target = max(1, round(scale * self.initial_batch_size))
        accumulation = self.choice.accumulation
        local = max(1, target // (accumulation * self.replicas))
        self.choice = Choice(local, accumulation, self.replicas)

    # -- measurements -------------------------------------------------------------------------

    @contextmanager
    def timed_microbatch(self, samples: int) -> Iterator[None]:
        """Time one micro-batch's forward and backward for the throughput model: on a GPU, by
        its device's work (`zeus_bso.elastic.timing`: a backward returns once its kernels are
        launched, whatever their size)."""
        started = self.timer.start()
        yield
        self.record_samples(samples)
        if samples == self.choice.local_bsz:
            self.timer.stop(started, samples, self.throughput)

    def record_samples(self, samples: int) -> None:
        """Count a micro-batch's samples (`timed_microbatch` does): an optimizer step that took
        fewer than a whole batch (an epoch's last) moves a schedule that `follow` wraps by less.
        One of another size than the one set, but an epoch's last, is refused
        (`zeus_bso.elastic.loader_check`)."""
        self._sizes.see(samples, self.choice.local_bsz)
        self._step_samples += samples

    def follow(self, scheduler: Any) -> FollowedSchedule:
        """``scheduler``, a learning-rate schedule stepped after each optimizer step (or every
        few), made to keep pace with the training as the batch size grows: step the returned
        schedule instead (``scheduler = ebs.follow(scheduler)``); each of its steps is taken
        as many times as the optimizer steps since the last are worth in steps of the initial
        batch size (their gain under ``adascale`` and ``sqrt``, their samples under ``linear``
        and ``none``; `zeus_bso.elastic.schedules`). A schedule sized in steps at the initial
        batch size (``OneCycleLR(total_steps=...)``, a warm-up of so many steps) then keeps
        pace with the training. Its ``state_dict`` is the schedule's. Not for a schedule
        stepped each epoch: an epoch is the same samples whatever the batch size."""
        self.check_schedules = False
        return follow(scheduler, self.schedule_progress)

    def record_microbatch(self, parameters: Iterable[Any]) -> None:
        """After each micro-batch's backward: notes that micro-batch's own gradient (not
        needed, and a no-op, when the replicas of a DDP model give the noise)."""
        if self._ddp:
            return
        self._micro.record(_torch(), parameters, self.choice.accumulation)

    def attach(self, optimizer: Any, ddp_model: Any | None = None) -> Any:
        """Wrap ``optimizer.step``: update the noise estimate, scale each parameter group's
        learning rate by the rule, step, and restore the learning rates exactly (so that LR
        schedulers keep working); and ``optimizer.zero_grad``: gradients zeroed without a step
        (AMP's ``GradScaler`` skips a step whose gradients overflowed) are not measured. An
        optimizer attached already is left as it is.

        A step given a closure (Lightning passes one that runs the forward and backward) is
        measured after the closure has run, before the parameters change.

        Args:
            optimizer: a torch optimizer that evaluates its closure once (SGD, Adam, ...).
            ddp_model: the ``DistributedDataParallel`` model, with several replicas: the noise
                then comes from the replicas' gradients (see the module docstring). Attach
                before its first backward; DDP takes one communication hook per model.

        A run of the batch size optimizer (`zeus_bso.BatchSizeOptimizer`, the callbacks and
        loop adapters) that these steps train is refused at its next report: the server judges
        and charges it at the size it dispatched (`zeus_bso.training.size_changes`).
        """
        if optimizer in self._attached:
            return optimizer  # its step would take the factor twice, and DDP refuse a 2nd hook
        accumulating = getattr(getattr(optimizer, "gradient_state", None), "num_steps", 1)
        if isinstance(accumulating, int) and accumulating > 1:
            # Accelerate's prepared optimizer under Accelerator(gradient_accumulation_steps=k):
            # every k-th call steps, the others skip, and each call would count as a step.
            raise ConfigurationError(
                f"the Accelerator accumulates {accumulating} micro-batches a step "
                "(gradient_accumulation_steps), and ElasticBatchSize sets the accumulation "
                "itself, each epoch: build the Accelerator without gradient_accumulation_steps "
                "and step every ebs.accumulation_steps micro-batches, as the plain loop does"
            )
        if ddp_model is not None:
            self._watch_replicas(ddp_model)
        original = optimizer.step

        def scale_lrs() -> list[float]:
            self._observe_step()
            gain = self.predict_gain(self.scale)
            self.progress += gain
            samples, self._step_samples = self._step_samples, 0
            whole = self.choice.global_batch / self.replicas  # what this process takes a step
            fraction = min(1.0, samples / whole) if samples else 1.0
            self.schedule_progress.stepped(step_worth(self.lr_rule, self.scale, gain, fraction))
            factor = lr_factor(self.lr_rule, self.scale, gain)
            saved = [group["lr"] for group in optimizer.param_groups]
            if self.check_schedules and self._pace.falls_behind(saved, self.scale):
                self.check_schedules = False  # said once
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * factor
            if saved:
                self._stepped = (factor, optimizer.param_groups[0]["lr"])
            return saved

        def step(_optimizer: Any, closure: Any = None, *args: Any, **kwargs: Any) -> Any:
            size_changes.stepped()  # a run of the batch size optimizer's refuses these
            saved: list[float] | None = None
            if closure is None:
                saved = scale_lrs()
                wrapped = None
            else:

                def wrapped() -> Any:
                    nonlocal saved
                    result = closure()
                    if saved is None:  # an optimizer may evaluate it again: measure once
                        saved = scale_lrs()
                    return result

            try:
                return original(wrapped, *args, **kwargs)
            finally:
                if saved is not None:
                    for group, lr in zip(optimizer.param_groups, saved, strict=True):
                        group["lr"] = lr

        original_zero_grad = optimizer.zero_grad

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            self._forget_unstepped()
            return original_zero_grad(*args, **kwargs)

        # A method of the optimizer, as torch's own step is: a learning-rate schedule built
        # after this wraps it again, and takes it for a method. One built before wrapped the
        # step that this one calls, which still tells it that the optimizer stepped; the mark
        # it reads for that wrapping goes on this one too, or every schedule step warns that
        # the step was replaced.
        if getattr(original, "_wrapped_by_lr_sched", False):
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        optimizer.step = types.MethodType(step, optimizer)
        optimizer.zero_grad = zero_grad
        self._attached.add(optimizer)
        return optimizer

    def _forget_unstepped(self) -> None:
        """Drop what the micro-batches since the last step recorded: gradients zeroed without a
        step (a step that AMP's ``GradScaler`` skipped, its gradients overflowed) say nothing
        of the next step's, whose micro-batches start from zero."""
        self._micro.forget()
        self._replicas.forget()

    def _watch_replicas(self, ddp_model: Any) -> None:
        torch = _torch()
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            raise ZeusBSOError("attach(ddp_model=...) needs torch.distributed to be initialised")
        clean_exit.register_at_exit()
        world = dist.get_world_size()
        if world != self.replicas:
            self.update_scale(self.scale, replicas=world)
        if world < 2:
            return  # one replica: the micro-batches give the noise

        def hook(state: Any, bucket: Any) -> Any:
            return self._replicas.hook(state, bucket)

        # DDP checks the hook's annotations against its own types; ours are strings here.
        hook.__annotations__ = {}
        try:
            ddp_model.register_comm_hook(None, hook)
        except RuntimeError as err:
            raise ZeusBSOError(
                f"could not register ElasticBatchSize's DDP communication hook ({err}); it "
                "needs the model's only hook, registered before the first backward"
            ) from err
        self._ddp = True

    def settle(self, timeout: float = clean_exit.SETTLE_TIMEOUT_S) -> bool:
        """Wait until the process group's threads hold no Python work (the DDP hook's
        callbacks, tensors of finished collectives).

        Call it when training ends (`ElasticBatchSizeCallback` does; interpreter exit does it
        too): such work still held by a gloo thread when the interpreter finalizes makes the
        process abort or hang after a successful run (see `zeus_bso.training.clean_exit`). Returns
        whether the threads went idle within ``timeout`` seconds.
        """
        return clean_exit.settle(timeout)

    def _observe_step(self) -> None:
        if self._ddp:
            self._observe_replicas()
            return
        observed = self._micro.step(_torch())
        if observed is not None:
            micro, mean_sqr = observed
            # Micro-batches of this process: each gradient is the mean over local_bsz samples.
            self.noise.update(micro, mean_sqr, self.choice.local_bsz)

    def _observe_replicas(self) -> None:
        observed = self._replicas.step(_torch(), self.replicas)
        if observed is not None:
            local_mean_sqr, mean_sqr = observed
            # Each replica's gradient is the mean over its accumulated micro-batches.
            samples = self.choice.local_bsz * self.choice.accumulation
            self.noise.update_mean(local_mean_sqr, self.replicas, mean_sqr, samples)

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs."""
        self.timer.read(self.throughput)
        return {
            "choice": [self.choice.local_bsz, self.choice.accumulation, self.choice.replicas],
            "progress": self.progress,
            "noise": self.noise.state_dict(),
            "throughput": {str(b): t for b, t in self.throughput._samples.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict`. A run resumed on another number of processes than
        `replicas` says (its world size, once `attach` or the Lightning callback has seen it)
        keeps the checkpoint's global batch, spread over these processes within the bounds:
        the learning rate's scale and the noise's sample counts stay those of the batch that
        trains (the checkpoint's own spread would train another global batch at its scale)."""
        local, accumulation, replicas = state["choice"]
        saved = Choice(int(local), int(accumulation), int(replicas))
        self.choice = saved if saved.replicas == self.replicas else self._spread(saved.global_batch)
        self.progress = float(state["progress"])
        self.noise.load_state_dict(state["noise"])
        self.throughput._samples = {int(b): list(t) for b, t in state["throughput"].items()}


def _say_change(
    before: int, choice: Choice, gain: float, scale: float, show: Callable[[str], None] | None
) -> None:
    """Says a new global batch size, on the first process alone: through ``show`` (None: the
    ``zeus_bso.elastic`` logger, at INFO)."""
    dist = torch_distributed()
    if dist is not None and dist.get_rank() != 0:
        return
    processes = "1 process" if choice.replicas == 1 else f"{choice.replicas} processes"
    said = (
        f"ElasticBatchSize: the batch size goes from {before} to {choice.global_batch} "
        f"({choice.local_bsz} a micro-batch x {choice.accumulation} accumulated, {processes}): "
        f"{scale:.2f}x the initial batch, a predicted gain of {gain:.2f}"
    )
    if show is not None:
        show(said)
    else:
        logger.info(said)


def _same_on_every_rank(choice: Choice) -> Choice:
    """Rank 0's choice, on every rank of an initialised process group (else ``choice``)."""
    dist = torch_distributed()
    if dist is None or dist.get_world_size() < 2:
        return choice
    shared = broadcast_object([choice.local_bsz, choice.accumulation, choice.replicas])
    local, accumulation, replicas = shared
    return Choice(int(local), int(accumulation), int(replicas))


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ZeusBSOError(f"ElasticBatchSize needs torch: {INSTALL_HINT}") from err
    return torch
