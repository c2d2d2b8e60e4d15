"""Lightning's memory check: training steps of the module, tried and undone
(`zeus_bso.integrations.probe`), each rank alone (see the architecture page's "Memory check")."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations.lightning_batch_check import batch_refused
from zeus_bso.integrations.lightning_packages import package_of
from zeus_bso.integrations.lightning_trainer import BatchTarget
from zeus_bso.integrations.loaders import generators_kept, no_batches, sized_len
from zeus_bso.integrations.probe import NOT_TRIED, longest_batch, step, undone
from zeus_bso.training import TrialSession
from zeus_bso.training.sharded import sharding

logger = logging.getLogger(__name__)

SHARDING_STRATEGIES = (
    "FSDPStrategy",
    "DeepSpeedStrategy",
    "ModelParallelStrategy",
    "XLAFSDPStrategy",
)
"""Lightning's strategies that shard the module, its gradients or its optimizers' state across
processes: a step tried by hand, outside the strategy, cannot take what they shard."""


def sharded_by(strategy: Any, pl_module: Any) -> str | None:
    """What shards the fit's module across processes: its ``strategy`` (by class name, of
    either Lightning package) or the module's own sharding (`sharding`). None: nothing does."""
    classes = {cls.__name__ for cls in type(strategy).__mro__}
    named = next((name for name in SHARDING_STRATEGIES if name in classes), None)
    return named or sharding(pl_module)


def checks_memory(session: TrialSession, trainer: Any, pl_module: Any, steps: int) -> bool:
    """Whether the fit tries ``steps`` steps first: the batch size never ran on these GPUs, the
    module optimizes automatically (a manual step's collectives cannot be tried alone), and no
    strategy shards it (`sharded_by`; said where it would have been tried)."""
    if steps <= 0 or not session.memory_unknown or not pl_module.automatic_optimization:
        return False
    if (sharded := sharded_by(trainer.strategy, pl_module)) is not None:
        if trainer.is_global_zero:
            logger.info(NOT_TRIED, session.micro_batch_size, sharded)
        return False
    return True


TAKE_EACH_MODES = ("min_size", "max_size_cycle", "max_size")
"""The modes of a ``CombinedLoader`` in which each step takes a batch of each of its iterables
(its ``sequential`` mode takes them in turn). Its mode is private (``_mode``): one that does
not say has its first batches tried."""


class LoaderRefusedError(ConfigurationError):
    """The train DataLoader's first batch tried does not have the size set (`batch_refused`):
    steps of it would say nothing of the size's memory, and the fit would not train it."""


def try_size(
    trainer: Any,
    pl_module: Any,
    session: TrialSession,
    target: BatchTarget,
    size: int,
    *,
    steps: int,
    accumulates: bool,
    built: list[str],
    seen: list[int],
) -> None:
    """Try ``steps`` training steps at ``size`` samples a step (set on ``target``), at the
    learning rate a fit of it would take (of the session's batch size where the fit
    ``accumulates`` micro-batches of ``size``): `try_steps`, which raises an out-of-memory
    error, or `LoaderRefusedError` where the first batch does not have ``size`` samples (``built``:
    the DataLoaders built before the size was set, which `batch_refused` names; ``seen``: the
    sizes tried before in this fit whose first batches had them, to which ``size`` is added
    when its own has)."""
    target.set(size)
    if session.lr.rule != "none":  # the rate a fit of it would take
        batch = session.batch_size if accumulates else size
        for optimizer in trainer.optimizers:
            session.lr.scale(optimizer, batch)
    loaders = target.loader()
    combined = package_of(trainer).combined_loader
    if isinstance(loaders, combined):  # the module's own: its mode says how steps take them
        takes_each = getattr(loaders, "_mode", None) in TAKE_EACH_MODES
    else:  # as the fit loop combines what it is given: each step takes a batch of each
        loaders, takes_each = combined(loaders, "max_size_cycle"), True
    iterables, lengths = loaders.iterables, [sized_len(loader) for loader in loaders.flattened]
    only_batch = all(length == 1 for length in lengths)
    if refused := no_batches(iterables, size):  # nothing to try: nothing would train
        raise LoaderRefusedError(refused)

    def first(batch: Any) -> None:
        if refused := batch_refused(
            trainer, batch, size, target, built, iterables, only_batch, earlier=seen
        ):
            raise LoaderRefusedError(refused)
        seen.append(size)

    with generators_kept(*loaders.flattened):
        longest = longest_batches(loaders, size, takes_each=takes_each)
        try_steps(trainer, pl_module, loaders, steps, first, longest)


def longest_batches(
    loaders: Any, size: int, *, takes_each: bool = True
) -> Iterator[tuple[Any, int, int]] | None:
    """Where the fit trains on DataLoaders whose samples differ in length, and are known to
    (`zeus_bso.integrations.probe.longest_batch`): each one's batch of the ``size`` longest,
    collated by its ``collate_fn``, at every step, as the fit loop's iterator gives batches
    (with their index and the DataLoader's). Several DataLoaders (a dict, a list of them, as
    ``train_dataloader()`` may return) give a step a batch of each (``takes_each``: the
    fit combines them so, as does a ``CombinedLoader`` of the module's own in the
    `TAKE_EACH_MODES`; one that takes them in turn has its first batches tried): those whose
    lengths are not known give their first.
    None: the steps take the fit's own batches."""
    flattened = loaders.flattened
    if len(flattened) == 1 and loaders.iterables is flattened[0]:
        batch = longest_batch(flattened[0], size)
        return None if batch is None else ((batch, index, 0) for index in itertools.count())
    if not takes_each:  # a CombinedLoader that takes them in turn: its first batches
        return None
    longest = [longest_batch(loader, size) for loader in flattened]
    if all(batch is None for batch in longest):
        return None
    steps = type(loaders)(loaders.iterables, "max_size_cycle")  # the same structure
    steps.flattened = [
        itertools.repeat(next(iter(loader)) if batch is None else batch)
        for loader, batch in zip(flattened, longest, strict=True)
    ]
    return (batch for batch in steps)  # a CombinedLoader's len would be infinite


def try_steps(
    trainer: Any,
    pl_module: Any,
    loaders: Any,
    steps: int,
    first: Callable[[Any], None],
    batches: Iterator[tuple[Any, int, int]] | None = None,
) -> None:
    """Run ``steps`` training steps of ``pl_module`` on this rank alone (the module unwrapped:
    no collective), with the fit's optimizers and ``loaders`` (the fit's train data at the
    batch size tried, in a ``CombinedLoader``), each given to ``training_step`` as the fit loop
    gives it (`step_arguments`), then undo them: the weights, the optimizers' state and the
    random state are restored. What the module logs meanwhile is dropped (the steps are not
    the fit's). ``first`` sees the first batch before its step (not one a ``dataloader_iter``
    step draws itself). ``batches``: what the steps take instead of ``loaders``' batches
    (`longest_batches`). An out-of-memory error is raised."""
    quiet = {name: getattr(pl_module, name) for name in ("log", "log_dict")}
    for name in quiet:  # Lightning's own refuse a call outside its loop
        setattr(pl_module, name, lambda *args, **kwargs: None)
    try:
        with undone(pl_module, trainer.optimizers):
            drawn = step_arguments(
                trainer, pl_module, iter(loaders) if batches is None else batches, steps, first
            )
            for arguments in drawn:
                with trainer.precision_plugin.train_step_context():
                    out = pl_module.training_step(*arguments)
                step(out["loss"] if isinstance(out, dict) else out, trainer.optimizers)
    finally:
        for name in quiet:
            delattr(pl_module, name)
        loaders.reset()  # its DataLoaders' workers shut down


def step_arguments(
    trainer: Any,
    pl_module: Any,
    batches: Iterator[tuple[Any, int, int]],
    steps: int,
    first: Callable[[Any], None],
) -> Iterator[tuple[Any, ...]]:
    """The arguments of ``steps`` calls of ``pl_module.training_step`` on ``batches`` (the
    ``(batch, batch_idx, dataloader_idx)`` a ``CombinedLoader``'s iterator gives), as the fit
    loop gives them: the batch on the module's device and its index (where the step takes
    one: ``batch_idx`` is optional); or, where the step asks for a ``dataloader_iter``, the
    iterator it draws its batches from (and moves them itself), ending early where it drew
    them all. ``first`` sees the first batch."""
    takes = package_of(trainer).takes
    if takes(pl_module.training_step, "dataloader_iter", explicit=True):
        for _ in range(steps):
            yield (batches,)
        return
    with_index = takes(pl_module.training_step, "batch_idx", min_args=2)
    for number, (batch, index, _) in zip(range(steps), batches, strict=False):
        if number == 0:
            first(batch)
        batch = trainer.strategy.batch_to_device(batch)
        yield (batch, index) if with_index else (batch,)
