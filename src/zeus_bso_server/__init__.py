"""zeus-bso server: persistence and HTTP around the policy in `zeus_bso.policy`."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zeus-bso")
    """The installed distribution's version (written once, in `zeus_bso.__version__`): read
    from its metadata, so that the server imports nothing of the client package's face."""
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
