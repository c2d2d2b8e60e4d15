"""zeus-bso server: persistence and HTTP around the policy in `zeus_bso.policy`.

Importing this package stays quick (its commands' entry point holds Ctrl-C only once it has
loaded): ``__version__`` is read from the installed metadata when first asked for."""

from __future__ import annotations

_version: list[str] = []
"""The installed version, once read (no functools: its import would slow every start-up)."""


def _installed_version() -> str:
    """The installed distribution's version (written once, in `zeus_bso.__version__`): read
    from its metadata, so that the server imports nothing of the client package's face."""
    if not _version:
        from zeus_bso.entry import installed_version

        _version.append(installed_version())
    return _version[0]


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
