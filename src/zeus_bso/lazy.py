"""Names of a package imported when first asked for (a module's ``__getattr__``, PEP 562)."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing takes ~20 ms a command's start-up needs
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


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
