"""``ElasticBatchSizeCallback``: `ElasticBatchSize` in a Lightning fit.

    ebs = ElasticBatchSize(initial_batch_size=64, max_batch_size=1024, local_bsz_bounds=(32, 256))
    trainer = Trainer(callbacks=[ElasticBatchSizeCallback(ebs)],
                      reload_dataloaders_every_n_epochs=1)

The batch size (``batch_arg_name`` on the model, its hparams or the datamodule, or the train
DataLoader given to ``trainer.fit``, built again at each size) and the gradient accumulation
change between epochs; Lightning rebuilds the DataLoader each epoch. The first are set when the
fit is set up, before ``configure_optimizers``: a schedule sized there from
``trainer.estimated_stepping_batches`` is sized for the initial batch size, which the first epoch
trains. The callback wraps the optimizer's ``step`` for the learning-rate rule and measures each
micro-batch; a schedule stepped each optimizer step (``interval="step"``) is stepped by what each
step is worth in steps of the initial size (`ElasticBatchSize.follow`), so that it keeps pace
with the training as the batch grows (in a fit that ``max_steps`` ends, as written: the fit
takes the steps the schedule was sized for).

What the elastic batch size stands at (`ElasticBatchSize.metrics`) goes to the Trainer's
loggers: the rate each optimizer step took and its factor (``elastic/lr``,
``elastic/lr_factor``) at the steps Lightning logs, the rest at each epoch's end, for the epoch
that trained (``elastic/batch_size``, ``elastic/gain``, ``elastic/noise_scale``...).
"""

from __future__ import annotations

import weakref
from typing import Any

from zeus_bso.elastic.batch_size import ElasticBatchSize
from zeus_bso.elastic.pickling import WithoutWeakSets
from zeus_bso.errors import ZeusBSOError
from zeus_bso.lazy import require

require("lightning.pytorch", "ElasticBatchSizeCallback needs PyTorch Lightning", "lightning")
import lightning.pytorch as pl  # noqa: E402 (after the install hint)

from zeus_bso.integrations.lightning_attributes import holds  # noqa: E402
from zeus_bso.integrations.lightning_batch_check import batch_refused  # noqa: E402
from zeus_bso.integrations.lightning_packages import batch_sizes, is_a, package_of  # noqa: E402
from zeus_bso.integrations.lightning_trainer import (  # noqa: E402
    BatchTarget,
    loader_given_to_fit,
    loaders_built,
    no_batch_size,
    rebuild_for_the_batch_size,
    unsettable,
)
from zeus_bso.integrations.loaders import flattened, sized_len  # noqa: E402


class ElasticBatchSizeCallback(pl.Callback, WithoutWeakSets):
    """Lets `ElasticBatchSize` choose each epoch's batch size and accumulation."""

    weak_sets = ("_accumulated",)  # pickled (ddp_spawn) without this process's Trainers

    def __init__(self, elastic: ElasticBatchSize, batch_arg_name: str = "batch_size") -> None:
        super().__init__()
        self.elastic = elastic
        self.batch_arg_name = batch_arg_name
        self._batch_started: Any = 0.0
        self._whole_batch = True
        """Whether the micro-batch under way has the whole micro-batch size (its time counts)."""
        self._part = 0
        """Which of several combined train DataLoaders takes the size (their batch's part)."""
        self._accumulated: weakref.WeakSet[pl.Trainer] = weakref.WeakSet()
        """The Trainers whose accumulation this callback set (fit again, one holds its last)."""
        self._logged_steps = 0
        """The optimizer steps when the rate was last logged."""
        self._target: BatchTarget | None = None
        """Where each epoch's size goes (the model's attribute, or the DataLoader given to the
        fit, built again): from ``setup``."""
        self._built_early: list[str] = []
        """The DataLoaders the model or datamodule held before the size was first set."""
        self._sizes_seen: list[int] = []
        """The micro-batch sizes of the fit's epochs so far whose first batches had them."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Here, before configure_optimizers and before any DataLoader is built: a schedule
        # sized from the data (trainer.estimated_stepping_batches, which builds the first
        # epoch's DataLoader) sees the initial batch size and accumulation, and the first
        # epoch trains them.
        if stage != "fit":
            return
        if getattr(trainer, "reload_dataloaders_every_n_epochs", 0) != 1:
            raise ZeusBSOError(
                "ElasticBatchSizeCallback changes the batch size between epochs: create the "
                "Trainer with reload_dataloaders_every_n_epochs=1"
            )
        name = self.batch_arg_name
        target = BatchTarget(trainer, pl_module, name)
        if refused := loader_given_to_fit(trainer, name, target.given, elastic=True):
            raise ZeusBSOError(refused)
        if target.given is None and not holds(trainer, pl_module, name):
            raise ZeusBSOError(no_batch_size(name, trainer, pl_module))
        if target.given is None and (refused := unsettable(trainer, pl_module, name)):
            raise ZeusBSOError(refused)
        if refused := _sets_the_same(trainer, accumulates=trainer not in self._accumulated):
            raise ZeusBSOError(refused)
        self._target = target
        self._built_early = loaders_built(trainer, pl_module)  # before the size is set
        self._sizes_seen = []
        self.elastic.show = package_of(trainer).info  # Lightning's console, as its callbacks
        if trainer.world_size != self.elastic.replicas:
            # The same global batch, spread over the processes.
            self.elastic.update_scale(self.elastic.scale, replicas=trainer.world_size)
        self._apply(trainer, self.elastic.choice.local_bsz)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Each fit's: a later fit with this callback (a notebook's, the next phase of a
        # training) builds its optimizers, schedules and DDP model again. An optimizer attached
        # already, a schedule followed already, is left as it is.
        ddp_model = _ddp_model(trainer) if trainer.world_size > 1 else None
        if trainer.world_size > 1 and ddp_model is None:
            raise ZeusBSOError(
                "ElasticBatchSizeCallback with several processes needs a DDP strategy "
                f"(strategy 'ddp', 'ddp_spawn', ...), not {type(trainer.strategy).__name__}"
            )
        # The fit's schedules are followed below, or stepped as written on purpose.
        self.elastic.check_schedules = False
        for index, optimizer in enumerate(trainer.optimizers):
            # One communication hook per model: the first optimizer's step reads it.
            self.elastic.attach(optimizer, ddp_model=ddp_model if index == 0 else None)
        for config in trainer.lr_scheduler_configs if _bounded_by_samples(trainer) else ():
            if config.interval == "step" and not config.reduce_on_plateau:
                # Sized in steps of the initial size; checkpoints hold the schedule's state.
                config.scheduler = self.elastic.follow(config.scheduler)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        trainer.accumulate_grad_batches = self.elastic.accumulation_steps

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_started = self.elastic.timer.start()  # on a GPU, its device's time
        self._whole_batch = True
        try:  # an epoch's last batch may be short: it moves the schedules by its samples
            sizes = batch_sizes(trainer, batch)
        except Exception:  # a batch whose size Lightning cannot tell: counted as whole
            return
        local_bsz = self.elastic.choice.local_bsz
        if batch_idx == 0 and self._target is not None:  # the epoch's size: what trains?
            built = self._built_early
            seen = self._sizes_seen
            if refused := batch_refused(
                trainer, batch, local_bsz, self._target, built, elastic=True, earlier=seen
            ):
                raise ZeusBSOError(refused)
            seen.append(local_bsz)
        if local_bsz in sizes and sizes[self._part % len(sizes)] != local_bsz:
            self._part = sizes.index(local_bsz)  # the train DataLoader that takes the size
        samples = sizes[self._part % len(sizes)]
        self._whole_batch = samples == local_bsz
        self.elastic.record_samples(samples)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._whole_batch:  # a short one's time says nothing of the size's
            local_bsz = self.elastic.choice.local_bsz
            self.elastic.timer.stop(self._batch_started, local_bsz, self.elastic.throughput)
        self.elastic.record_microbatch(pl_module.parameters())

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # At the steps Lightning logs (log_every_n_steps), as LearningRateMonitor does: straight
        # to the loggers, which costs nothing at the other steps (self.log costs about as much
        # as the optimizer step of a small model at every micro-batch).
        steps = self.elastic.schedule_progress.steps
        if steps == self._logged_steps or not trainer.is_global_zero or not trainer.loggers:
            return  # a micro-batch accumulated: no step since the last logged
        if trainer.global_step % max(1, trainer.log_every_n_steps):
            return
        self._logged_steps = steps
        rates = {k: v for k, v in self.elastic.metrics().items() if k in _STEP_METRICS}
        for logger in trainer.loggers:
            logger.log_metrics(rates, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # What the epoch trained, before the next size is chosen.
        for name, value in self.elastic.metrics().items():
            if name not in _STEP_METRICS:
                _log(pl_module, name, value)
        # The next epoch's DataLoader is built before on_train_epoch_start: decide now, within
        # what the data makes a step of (a size without a batch ends the fit: no training
        # batch; a step of more micro-batches than an epoch has takes the epoch's alone).
        self.elastic.data_bound = _data_bound(trainer, self.elastic.choice.local_bsz)
        self._apply(trainer, self.elastic.get_local_bsz())

    def _apply(self, trainer: pl.Trainer, local_bsz: int) -> None:
        assert self._target is not None
        self._target.set(local_bsz)
        trainer.accumulate_grad_batches = self.elastic.accumulation_steps
        self._accumulated.add(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.elastic.settle()  # before the program may end: see training.clean_exit

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.elastic.settle()

    def state_dict(self) -> dict[str, Any]:
        return self.elastic.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        self.elastic.load_state_dict(state_dict)
        if self._target is not None:
            # A resumed fit trains the checkpoint's size from its first epoch: most strategies
            # load the checkpoint before configure_optimizers; where one loads it after, what
            # was built at the initial size is built again.
            trainer = self._target.trainer
            before = (self._target.size, trainer.accumulate_grad_batches)
            self._apply(trainer, self.elastic.choice.local_bsz)
            if (self._target.size, trainer.accumulate_grad_batches) != before:
                rebuild_for_the_batch_size(trainer)


def _sets_the_same(trainer: pl.Trainer, *, accumulates: bool) -> str | None:
    """Why the fit cannot grow its batch: something else sets the batch size or the gradient
    accumulation that the callback sets each epoch (whichever set it last would train, while
    the noise and the rate's scale took the callback's). ``accumulates``: the Trainer's
    ``accumulate_grad_batches`` is its own (not what this callback set in an earlier fit).
    None: nothing does."""
    if any(is_a(callback, "BatchSizeFinder") for callback in trainer.callbacks):
        what = "Lightning's BatchSizeFinder (or Tuner.scale_batch_size) chooses the batch size"
        fix = "remove it from the Trainer's callbacks"
    elif any(is_a(callback, "GradientAccumulationScheduler") for callback in trainer.callbacks):
        what = "a GradientAccumulationScheduler sets the gradient accumulation"
        fix = "remove it from the Trainer's callbacks"
    elif accumulates and trainer.accumulate_grad_batches != 1:
        what = f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) accumulates"
        fix = "leave accumulate_grad_batches out"
    else:
        return None
    return (
        f"{what} too, and ElasticBatchSizeCallback sets both each epoch: {fix}. The "
        "elastic's initial_batch_size is the global batch of an optimizer step, accumulated "
        "micro-batches included (max_batch_size and local_bsz_bounds bound its growth)"
    )


_STEP_METRICS = ("elastic/lr", "elastic/lr_factor")
"""Logged at the steps Lightning logs; the rest at each epoch's end."""


def _log(pl_module: pl.LightningModule, name: str, value: float) -> None:
    # The same on every rank (the noise estimate and the choice are shared): with
    # rank_zero_only, Lightning reduces nothing, and sync_dist=True keeps its advice to sync
    # (a warning a value, on every rank of a distributed fit) off; batch_size=1: one value an
    # epoch (Lightning would read a size from the last batch, which may not tell it).
    pl_module.log(
        name, value, on_step=False, on_epoch=True, rank_zero_only=True, sync_dist=True, batch_size=1
    )


def _data_bound(trainer: pl.Trainer, local_bsz: int) -> int | None:
    """The samples an epoch gives this process, by the train DataLoader that takes the size (of
    ``local_bsz`` this epoch): no optimizer step takes more. A larger micro-batch is short, or
    makes no batch where the DataLoader drops a short last one (Lightning then ends the fit: "No
    training batches"); a step of more micro-batches is cut short at the epoch's end. None: its
    sampler has no length."""
    bounds = [
        sized_len(loader.sampler)
        for loader in flattened(trainer.train_dataloader)
        if getattr(loader, "batch_size", 0) == local_bsz
    ]
    return min((n for n in bounds if n), default=None)


def _bounded_by_samples(trainer: pl.Trainer) -> bool:
    """Whether the fit ends after so many samples (``max_epochs``, a fraction of each epoch's
    batches), where a schedule that `ElasticBatchSize.follow` steps ends with it. One that ends
    after so many optimizer steps or batches, whatever their size (``max_steps``, a count of
    ``limit_train_batches``), takes as many steps as its schedule was sized for
    (``estimated_stepping_batches``) at any size: its schedules are stepped as written."""
    steps = trainer.max_steps
    return (steps is None or steps < 0) and isinstance(trainer.limit_train_batches, float)


def _ddp_model(trainer: pl.Trainer) -> Any | None:
    from torch.nn.parallel import DistributedDataParallel

    model = trainer.strategy.model
    return model if isinstance(model, DistributedDataParallel) else None
