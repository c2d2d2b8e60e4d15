"""Lightning's two packages: ``lightning.pytorch`` (the ``lightning`` package) and the classic
``pytorch_lightning``. Their Trainers take only their own package's callbacks, modules and
helpers, so `zeus_bso.integrations.lightning.ZeusBSOCallback` subclasses the Callback of every
package installed (`CALLBACKS`) and uses the helpers of the package of the Trainer that runs it
(`package_of`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zeus_bso.lazy import warn_if_older

INSTALL_HINT = "pip install 'zeus-bso[lightning]'"


@dataclass(frozen=True)
class LightningPackage:
    """What the callback uses of one of Lightning's two packages."""

    name: str
    callback: type
    fitting: Any
    is_overridden: Callable[..., bool]
    hasattr: Callable[[Any, str], bool]
    getattr: Callable[[Any, str], Any]
    setattr: Callable[[Any, str, Any], None]
    info: Callable[[str], None]
    batch_size_of: Callable[[Any], int]
    combined_loader: type
    takes: Callable[..., bool]
    """Whether a hook's signature has a parameter (``is_param_in_hook_signature``): the fit loop
    gives ``training_step`` its ``batch_idx`` only where it takes one, and a
    ``dataloader_iter`` in place of the batch where it asks for that."""
    """Its ``CombinedLoader``: the fit loop's train data, whatever ``train_dataloader()``
    returns (one DataLoader, or a dict or list of them)."""
    sigterm: tuple[type[BaseException], ...]
    """The exception its own SIGTERM handler raises (none before Lightning 2.3)."""


def _package(name: str) -> LightningPackage | None:
    """The package ``name`` (``lightning.pytorch`` or ``pytorch_lightning``), or None where it
    is not installed."""
    try:
        package = importlib.import_module(name)
        states = importlib.import_module(f"{name}.trainer.states")
        helpers = importlib.import_module(f"{name}.utilities.model_helpers")
        parsing = importlib.import_module(f"{name}.utilities.parsing")
        rank_zero = importlib.import_module(f"{name}.utilities.rank_zero")
        data = importlib.import_module(f"{name}.utilities.data")
        exceptions = importlib.import_module(f"{name}.utilities.exceptions")
        combined = importlib.import_module(f"{name}.utilities.combined_loader")
        signatures = importlib.import_module(f"{name}.utilities.signature_utils")
    except ImportError:
        return None
    return LightningPackage(
        name=name,
        callback=package.Callback,
        fitting=states.TrainerFn.FITTING,
        is_overridden=helpers.is_overridden,
        hasattr=parsing.lightning_hasattr,
        getattr=parsing.lightning_getattr,
        setattr=parsing.lightning_setattr,
        info=rank_zero.rank_zero_info,
        batch_size_of=data.extract_batch_size,
        combined_loader=combined.CombinedLoader,
        takes=signatures.is_param_in_hook_signature,
        sigterm=tuple(
            found for found in [getattr(exceptions, "SIGTERMException", None)] if found is not None
        ),
    )


PACKAGES = tuple(
    found for found in map(_package, ("lightning.pytorch", "pytorch_lightning")) if found
)
"""The Lightning packages installed, ``lightning.pytorch`` first."""
if not PACKAGES:
    raise ImportError(f"ZeusBSOCallback needs PyTorch Lightning: {INSTALL_HINT}")

if len(PACKAGES) == 1:
    warn_if_older(PACKAGES[0].name)  # installed, but older than the lightning extra asks

CALLBACKS: tuple[type, ...] = tuple(found.callback for found in PACKAGES)
"""The Callback class of every Lightning package installed."""


def package_of(trainer: Any) -> LightningPackage:
    """The Lightning package of ``trainer`` (its class's module; asked at every batch)."""
    return _package_of_module(type(trainer).__module__)


@functools.cache
def _package_of_module(module: str) -> LightningPackage:
    """The package a Trainer's module belongs to. Where both are installed, the one a run uses
    is the one whose release counts: an old classic package beside a new ``lightning`` (left
    from an older install) warns only when a classic Trainer runs the callback."""
    found = next(
        (p for p in PACKAGES if module == p.name or module.startswith(f"{p.name}.")), PACKAGES[0]
    )
    warn_if_older(found.name)
    return found


def batch_sizes(trainer: Any, batch: Any, loaders: Any = None) -> list[int]:
    """The sizes of a fit's training ``batch``, one a train DataLoader's: ``train_dataloader()``
    may return a dict or a list of DataLoaders, which the fit loop combines (Lightning's
    ``CombinedLoader``) into batches that are a dict or a list of theirs (``loaders``: what it
    returned; by default the fit loop's). One size where there is one DataLoader. Raises what
    Lightning raises where it cannot tell a size."""
    loaders = trainer.train_dataloader if loaders is None else loaders
    parts = [batch]
    if isinstance(loaders, dict) and isinstance(batch, dict) and batch.keys() == loaders.keys():
        parts = list(batch.values())
    elif isinstance(loaders, list | tuple) and isinstance(batch, list | tuple):
        parts = list(batch) if len(loaders) == len(batch) > 1 else parts
    return [int(package_of(trainer).batch_size_of(part)) for part in parts]


def is_a(callback: Any, name: str) -> bool:
    """Whether ``callback`` is Lightning's callback class ``name`` (of either package), or one
    made from it."""
    return any(cls.__name__ == name for cls in type(callback).__mro__)
