"""Where a Lightning fit holds its batch size: ``batch_arg_name`` on the model, its hparams, the
datamodule or its hparams, as Lightning's own ``lightning_hasattr`` and ``lightning_setattr``
find it; or a dotted path under them (``data.batch_size``: ``self.hparams.data.batch_size`` of
a module built from a nested Hydra or OmegaConf config, ``cfg.data.batch_size``:
``self.cfg.data.batch_size``). And, for a refusal's words, where they hold a size otherwise."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Iterator, Mapping, MutableMapping
from types import SimpleNamespace
from typing import Any

from zeus_bso.integrations.lightning_packages import package_of

_MISSING = object()


def _holders(trainer: Any, pl_module: Any) -> list[Any]:
    """The model and the datamodule (where the fit has one)."""
    return [holder for holder in (pl_module, trainer.datamodule) if holder is not None]


def _roots(trainer: Any, pl_module: Any) -> Iterator[Any]:
    """The model, its hparams, the datamodule and its hparams (those there are)."""
    for holder in _holders(trainer, pl_module):
        yield holder
        hparams = getattr(holder, "hparams", None)
        if hparams is not None:
            yield hparams


def _child(node: Any, key: str) -> Any:
    """``node``'s ``key``: an item of a mapping (an AttributeDict, a DictConfig), else an
    attribute; `_MISSING` where it has none."""
    if isinstance(node, Mapping):
        return node.get(key, _MISSING)
    return getattr(node, key, _MISSING)


def _ends(trainer: Any, pl_module: Any, path: str) -> list[tuple[Any, str]]:
    """Where the dotted ``path`` leads under each root (`_roots`): its last object and key, one
    per object."""
    *middle, last = path.split(".")
    found: dict[int, tuple[Any, str]] = {}
    for root in _roots(trainer, pl_module):
        node = root
        for key in middle:
            node = _child(node, key)
            if node is _MISSING:
                break
        if node is not _MISSING and _child(node, last) is not _MISSING:
            found.setdefault(id(node), (node, last))
    return list(found.values())


def holds(trainer: Any, pl_module: Any, name: str) -> bool:
    """Whether the fit holds ``name`` (an attribute, or a dotted path) where the callback can
    set it."""
    if "." not in name:
        return bool(package_of(trainer).hasattr(pl_module, name))
    return bool(_ends(trainer, pl_module, name))


def read_only(node: Any, key: str) -> bool:
    """Whether ``node``'s ``key`` is a property without a setter (one that may read another
    holder: ``return self.hparams.batch_size``)."""
    found = getattr(type(node), key, None)
    return isinstance(found, property) and found.fset is None


def _set(node: Any, key: str, value: Any) -> None:
    if isinstance(node, MutableMapping):
        node[key] = value
    else:
        setattr(node, key, value)


def set_to(trainer: Any, pl_module: Any, name: str, value: int) -> None:
    """Set ``name`` (an attribute, or a dotted path) to ``value`` wherever the fit holds it, but
    on a property without a setter (which `follows` what the others hold)."""
    ends = _ends(trainer, pl_module, name)
    if "." not in name and not any(read_only(node, key) for node, key in ends):
        package_of(trainer).setattr(pl_module, name, value)  # as Lightning's own finders do
        return
    for node, key in ends:
        if not read_only(node, key):
            _set(node, key, value)


def follows(trainer: Any, pl_module: Any, name: str) -> bool:
    """Whether every property without a setter among the holders of ``name`` reads what the
    others hold (a datamodule's ``batch_size`` property that returns
    ``self.hparams.batch_size``): tried with a value none holds, then set back."""
    ends = _ends(trainer, pl_module, name)
    fixed = [(node, key) for node, key in ends if read_only(node, key)]
    settable = [(node, key) for node, key in ends if not read_only(node, key)]
    if not fixed:
        return True
    if not settable:
        return False
    before = [_child(node, key) for node, key in settable]
    trial = 1 + max((v for v in before if type(v) is int), default=0)
    try:
        for node, key in settable:
            _set(node, key, trial)
        return all(_child(node, key) == trial for node, key in fixed)
    except Exception:  # a getter that fails on the trial value follows nothing
        return False
    finally:
        for (node, key), value in zip(settable, before, strict=True):
            _set(node, key, value)


def names_a_size(name: str) -> bool:
    """Whether an attribute's name says it holds a batch's size (``batch_size_per_device``,
    ``train_batch_size``, ``bs``), not a count of batches (``num_batches``)."""
    counts = name.startswith(("num_", "n_")) or name.endswith("batches")
    return ("batch" in name or name == "bs") and not counts


def holding(trainer: Any, pl_module: Any, size: int, skip: str) -> list[tuple[str, str]]:
    """Where the model, the datamodule or their hparams hold ``size`` under a name that says
    batch (other than ``skip``): an attribute, or an entry of a config held in one (`_config_items`:
    the keyword arguments a DataLoader is built with, ``self.loader_kwargs["batch_size"]``; the
    script's parsed arguments, ``self.args.batch_size``). What a DataLoader that did not take
    the size set on ``skip`` may read instead (a per-device size a datamodule's ``setup()``
    derived, say): each as shown (``Class.attribute``) and as ``batch_arg_name`` would name it
    (``loader_kwargs.batch_size``)."""
    found: list[tuple[str, str]] = []

    def holds_size(name: Any, value: Any) -> bool:
        return isinstance(name, str) and names_a_size(name) and type(value) is int and value == size

    for holder in _holders(trainer, pl_module):
        kind = type(holder).__name__
        hparams = getattr(holder, "hparams", None)
        for where in (vars(holder), hparams if isinstance(hparams, dict) else {}):
            for name, value in where.items():
                if name != skip and holds_size(name, value):
                    found.append((f"{kind}.{name}", name))
                elif not name.startswith("_") and name != "hparams":
                    found += [
                        (f"{kind}.{name}{_shown_key(value, key)}", f"{name}.{key}")
                        for key, entry in _config_items(value) or ()
                        if f"{name}.{key}" != skip and holds_size(key, entry)
                    ]
    return found


def _shown_key(config: Any, key: str) -> str:
    """How ``config``'s entry ``key`` is written after it: ``['batch_size']`` of a mapping,
    ``.batch_size`` of an object."""
    return f"[{key!r}]" if isinstance(config, Mapping) else f".{key}"


def _config_items(node: Any) -> list[tuple[Any, Any]] | None:
    """The entries of ``node`` where it is a config: a mapping (a dict, a DictConfig), a
    namespace (``argparse.Namespace``, ``SimpleNamespace``), or a dataclass or pydantic model
    that can be set (not frozen); None: it is none (a module, a dataset, a number)."""
    try:
        if isinstance(node, Mapping):
            return list(node.items())
        if isinstance(node, Namespace | SimpleNamespace):
            return list(vars(node).items())
        params = getattr(type(node), "__dataclass_params__", None)
        if params is not None and not params.frozen and hasattr(node, "__dict__"):
            return list(vars(node).items())
        fields, config = (
            getattr(type(node), "model_fields", None),
            getattr(node, "model_config", {}),
        )
        if isinstance(fields, dict) and not config.get("frozen", False):  # a pydantic model
            return [(name, getattr(node, name)) for name in fields]
    except Exception:  # a config that cannot be read whole (missing values)
        return None
    return None


def nested(trainer: Any, pl_module: Any, name: str, depth: int = 3) -> list[str]:
    """The dotted paths under the model and the datamodule, ``depth`` deep at most, whose last
    key is ``name``: in their hparams (``data.batch_size``, a nested config's) or in a config
    one of them holds in an attribute (``args.batch_size``, of an ``argparse.Namespace`` kept
    as ``self.args``). What ``batch_arg_name`` may say where such a config holds the batch
    size."""
    paths: list[str] = []

    def walk(node: Any, prefix: str, left: int) -> None:
        items = _config_items(node)
        if items is None or left == 0:
            return
        for key, value in items:
            path = f"{prefix}{key}"
            if key == name and prefix:
                paths.append(path)
            walk(value, f"{path}.", left - 1)

    for holder in _holders(trainer, pl_module):
        walk(getattr(holder, "hparams", None), "", depth)
        for attribute, value in vars(holder).items():
            if not attribute.startswith("_") and attribute != "hparams":
                walk(value, f"{attribute}.", depth - 1)
    return sorted(set(paths))
