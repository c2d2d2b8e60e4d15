"""Names of a package imported when first asked for (a module's ``__getattr__``, PEP 562), and
optional dependencies imported with the install that brings them (`require`), warned of where
the installed release is older than zeus-bso's extra asks (`older_than_supported`)."""

from __future__ import annotations

import importlib
from functools import cache

TYPE_CHECKING = False  # not typing's: importing typing takes ~20 ms a command's start-up needs
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any


def require(module: str, needs: str, extra: str) -> ModuleType:
    """``module``, imported for an optional part of the package; where it is not installed, an
    ``ImportError`` that says what ``needs`` it (``"ZeusBSOFabric needs Lightning Fabric"``)
    and the install that brings it (``pip install 'zeus-bso[extra]'``); where it is older than
    the extra asks, a warning (`older_than_supported`)."""
    try:
        found = importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{needs}: pip install 'zeus-bso[{extra}]'") from err
    warn_if_older(module)  # installed, but older than the extra asks
    return found


def lazy_names(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], object]:
    """A ``__getattr__`` for ``package``: a name of ``modules`` (name: the module that defines
    it) is imported from its module when first asked for, and kept in ``namespace`` (the
    package's globals)."""

    def __getattr__(name: str) -> object:  # noqa: N807 (the module hook's name)
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__


# The oldest framework releases zeus-bso's extras ask for (``lightning>=2.4``: the lower bounds of
# its installed metadata, the releases its tests run the integrations on:
# tests/test_oldest_frameworks.py). pip keeps a framework that was there before zeus-bso was
# installed without its extra, and ``--no-deps`` or a conda environment keep what they have;
# below the floor the callbacks may fail where their tests cannot see it (before Lightning 2.4 and
# transformers 4.50, a run resumed under torch 2.6 or newer could not load its checkpoint).

FRAMEWORK_FLOORS = {
    "lightning": ("lightning", "lightning"),
    "pytorch_lightning": ("pytorch-lightning", "lightning"),
    "transformers": ("transformers", "transformers"),
    "accelerate": ("accelerate", "accelerate"),
}
"""A framework's top-level module: its distribution, and the requirement of ours whose lower
bound it must meet (the classic ``pytorch_lightning`` is released with ``lightning``'s numbers)."""


def _release(version: str) -> tuple[int, ...]:
    """A version's release numbers (``2.4.0rc1``: 2, 4, 0), trailing zeros dropped."""
    import re

    head = re.split(r"[a-z+]", version, maxsplit=1)[0]
    numbers = [int(part) for part in re.findall(r"\d+", head)]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


@cache
def floors() -> dict[str, str]:
    """The lower bound of each requirement of zeus-bso's extras, by name (none where zeus-bso's
    metadata cannot be read: a source tree on ``PYTHONPATH``)."""
    import re
    from importlib import metadata

    try:
        requirements = metadata.requires("zeus-bso") or []
    except metadata.PackageNotFoundError:
        return {}
    found: dict[str, str] = {}
    for requirement in requirements:
        bound = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", requirement)
        if bound is not None and "extra ==" in requirement:
            found.setdefault(bound[1].lower(), bound[2])
    return found


def older_than_supported(module: str) -> str | None:
    """Why the installed release of the framework of ``module`` (``lightning.pytorch``) is older
    than zeus-bso supports, in words that say what to install; None where it is not (or where
    it, or its floor, is not known)."""
    from importlib import metadata

    top = module.split(".", 1)[0]
    if top not in FRAMEWORK_FLOORS:
        return None
    distribution, asked = FRAMEWORK_FLOORS[top]
    floor = floors().get(asked)
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    if floor is None or _release(installed) >= _release(floor):
        return None
    return (
        f"{distribution} {installed} is older than zeus-bso supports ({asked}>={floor}, the "
        f"oldest release its tests run on): its callbacks may fail there, a resumed run "
        f"first; pip install -U '{distribution}>={floor}'"
    )


@cache
def warn_if_older(module: str) -> None:
    """Warn once a process (`older_than_supported`) where ``module``'s framework is too old."""
    if (words := older_than_supported(module)) is not None:
        import warnings

        warnings.warn(words, UserWarning, stacklevel=2)
