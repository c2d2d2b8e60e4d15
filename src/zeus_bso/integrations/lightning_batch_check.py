"""The check of a Lightning fit's first training batch (and, under the elastic batch size, each
epoch's): it has the size the callback set, else the fit would train one size while the server
charges (or the rate is scaled for) another. A refusal says why the DataLoader did not take the
size, in the words of what the script wrote: a DataLoader given to the fit whose batches are
its own, one kept from an earlier call, one built before the size was set, a dataset that makes
whole batches, or a fixed size (naming an attribute that holds the batch's size instead)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from zeus_bso.integrations.lightning_attributes import holding
from zeus_bso.integrations.lightning_packages import batch_sizes
from zeus_bso.integrations.lightning_trainer import BatchTarget, Trainer
from zeus_bso.integrations.loaders import batching_datasets


def batch_refused(
    trainer: Trainer,
    batch: Any,
    told: int,
    target: BatchTarget,
    built: list[str],
    loaders: Any = None,
    only_batch: bool | None = None,
    elastic: bool = False,
    earlier: Collection[int] = (),
) -> str | None:
    """Why the fit's first training ``batch`` cannot train the run: it does not have the size
    the server gave (``told``: the batch size, or the micro-batch of a fit that accumulates),
    so a DataLoader that ignores the size set on ``target`` would train at another size while
    the server charges this one (``built``: the DataLoaders that existed before the size was
    set, `zeus_bso.integrations.lightning_trainer.loaders_built`). Where the fit combines
    several train DataLoaders (`batch_sizes`), one of them at least has the size (the others
    keep theirs: the run's batch size is the one set). ``loaders``: what
    ``train_dataloader()`` returned, where the batch is the memory check's, before the fit loop
    has any; ``only_batch``: whether it is the only batch of an epoch (None: as the fit loop
    counts them); ``elastic``: the batch is an epoch's first, at the micro-batch size the
    elastic batch size set; ``earlier``: the sizes set before in this fit whose first batches
    had them (a batch of one of those comes from a DataLoader that ``train_dataloader()``
    built once and keeps). None: it has (or Lightning cannot tell its size; or it is the
    epoch's only batch, and smaller: the data is)."""
    loaders = trainer.train_dataloader if loaders is None else loaders
    try:
        sizes = batch_sizes(trainer, batch, loaders)
    except Exception:  # a batch whose size Lightning cannot tell: nothing to check
        return None
    if only_batch is None:
        only_batch = trainer.num_training_batches == 1
    if told in sizes or (max(sizes) < told and only_batch):
        return None
    return _Refusal(trainer, target, sizes, told, elastic).why(loaders, built, earlier)


@dataclass(frozen=True)
class _Refusal:
    """The words of a refusal of a batch of ``sizes`` where ``told`` was set on ``target``."""

    trainer: Trainer
    target: BatchTarget
    sizes: list[int]
    told: int
    elastic: bool

    def why(self, loaders: Any, built: list[str], earlier: Collection[int]) -> str:
        """What the DataLoader did instead of taking the size, and what to change."""
        name, setter = self.target.name, self.setter
        read = f"self.{name} (or self.hparams.{name})"
        if self.target.given is not None:  # built again at the size: its batches are its own
            return self.said(
                f"the train DataLoader the fit was given, built again with "
                f"batch_size={self.told}, yields batches of other sizes (its collate_fn, or a "
                "dataset that yields whole batches, makes them): build it so that batch_size "
                "alone sizes its batches"
            )
        if kept := sorted(set(self.sizes) & set(earlier)):
            return self.said(
                f"train_dataloader() returned the DataLoader it built at {kept[0]}, a size "
                f"{setter} set before (it keeps the one it built), but Lightning asks for it "
                f"again at each size set{self.when_again}: build a new DataLoader at each call "
                f"of train_dataloader(), from {read}"
            )
        if built:
            return self.said(
                f"the train DataLoader was built before {setter} set '{name}' (built then: "
                f"{', '.join(built)}; a datamodule's setup() and __init__ run before it): build "
                f"it in train_dataloader(), reading {read} there"
            )
        if whole := batching_datasets(loaders):
            return self.said(
                f"the train DataLoader takes its batches whole from its dataset "
                f"({', '.join(whole)}, batch_size=None), which was made at another size: make "
                f"it in train_dataloader() from {read}, not in setup() or __init__, which run "
                f"before {setter} sets it"
            )
        return self.said(
            f"(set on '{name}' of the model, its hparams or the datamodule): build the train "
            f"DataLoader with that attribute (DataLoader(..., batch_size=self.{name}), or "
            f"self.hparams.{name}), not a fixed size, or pass batch_arg_name=... naming the "
            f"attribute it reads{self.read_instead}",
            joined=" ",
        )

    @property
    def setter(self) -> str:
        return "ElasticBatchSizeCallback" if self.elastic else "the callback"

    def said(self, why: str, joined: str = ": ") -> str:
        """``why`` after what the batch had, and, but for the elastic's, that the run is not
        counted."""
        found = (
            self.sizes[0]
            if len(self.sizes) == 1
            else (f"{'/'.join(map(str, self.sizes))} (one a DataLoader's)")
        )
        has = (
            f"the epoch's first training batch has {found} samples, but the elastic batch size "
            f"set {self.told} samples a micro-batch"
            if self.elastic
            else f"the fit's first training batch has {found} samples, but this run's batch "
            f"size is {self.told}"
        )
        uncounted = "" if self.elastic else "; the run is not counted against the batch size"
        return f"{has}{joined}{why}{uncounted}"

    @property
    def when_again(self) -> str:
        """When the fit asks ``train_dataloader()`` for its DataLoader again, in words."""
        if self.elastic:
            return " (each epoch, as reload_dataloaders_every_n_epochs=1 has it)"
        return " (the memory check tries another size after one ran out of memory)"

    @property
    def read_instead(self) -> str:
        """The attributes that hold a size the batch had, in words (`holding`); empty: none."""
        module, name = self.target.module, self.target.name
        found = sorted(
            {place for size in self.sizes for place in holding(self.trainer, module, size, name)}
        )
        if not found:
            return ""
        shown = [where for where, _ in found]
        return (
            f" ({', '.join(shown)} {'holds' if len(shown) == 1 else 'hold'} the batch's size: "
            f"batch_arg_name={found[0][1]!r}, where the DataLoader reads it; callbacks set it "
            "after a datamodule's setup() ran)"
        )
