"""zeus-bso server: persistence and HTTP around the policy in `zeus_bso.policy`.

Importing this package stays quick (its commands' entry point holds Ctrl-C only once it has
loaded): ``__version__`` is read from the installed metadata when first asked for."""

from __future__ import annotations

import functools


@functools.cache
def _installed_version() -> str:
    """The installed distribution's version (written once, in `zeus_bso.__version__`): read
    from its metadata, so that the server imports nothing of the client package's face."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zeus-bso")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
