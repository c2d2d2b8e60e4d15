"""Free loopback ports, and folders for Unix sockets, for test servers."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

SOCKET_PATH_MAX = 107
"""The longest path a Unix socket's address holds (Linux: 108 bytes with the terminating NUL;
PostgreSQL's limit is the same)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def dropping_port() -> Iterator[int]:
    """A loopback port whose connections hang unopened, as those to a host that is down, or
    across a network that drops packets, do: a listening socket whose backlog is full."""
    with socket.socket() as dropping:
        dropping.bind(("127.0.0.1", 0))
        dropping.listen(0)
        port = int(dropping.getsockname()[1])
        queued = [socket.socket() for _ in range(3)]
        try:
            for held in queued:
                held.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    held.connect(("127.0.0.1", port))
            yield port
        finally:
            for held in queued:
                held.close()


CHROMIUM_SOCKET = len("org.chromium.Chromium.XXXXXX/SingletonSocket")
"""The path Chromium makes its process-singleton socket at, in the temporary folder."""


def fits(folder: Path, longest_name: int) -> bool:
    """Whether a socket named up to ``longest_name`` characters in ``folder`` has an address."""
    return len(os.fsencode(folder)) + 1 + longest_name <= SOCKET_PATH_MAX


def socket_environment(longest_name: int) -> dict[str, str]:
    """The environment of a program that makes its Unix sockets in the temporary folder
    (Chromium: `CHROMIUM_SOCKET`): this one's, with ``TMPDIR=/tmp`` where a socket would not
    fit in ours (under a deep one, Chromium ended at its start: "Socket path too long")."""
    environment = dict(os.environ)
    if not fits(Path(tempfile.gettempdir()), longest_name):
        environment["TMPDIR"] = "/tmp"
    return environment


def socket_folder(prefix: str, longest_name: int) -> Path:
    """A new folder for a test server whose Unix sockets (names of up to ``longest_name``
    characters) live in it: in the temporary folder (``TMPDIR``), or in ``/tmp`` where a socket
    there would be too long an address. Under a deep ``TMPDIR`` (a CI runner's workspace, say)
    PostgreSQL, MariaDB and the preloaded python could not bind their sockets, and every test
    that needed one of them failed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if fits(folder, longest_name):
        return folder
    folder.rmdir()
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
