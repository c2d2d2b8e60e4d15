"""Names of a package imported when first asked for (a module's ``__getattr__``, PEP 562), and
optional dependencies imported with the install that brings them (`require`)."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing takes ~20 ms a command's start-up needs
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any


def require(module: str, needs: str, extra: str) -> ModuleType:
    """``module``, imported for an optional part of the package; where it is not installed, an
    ``ImportError`` that says what ``needs`` it (``"ZeusBSOFabric needs Lightning Fabric"``)
    and the install that brings it (``pip install 'zeus-bso[extra]'``)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{needs}: pip install 'zeus-bso[{extra}]'") from err


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
