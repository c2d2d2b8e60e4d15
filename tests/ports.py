"""Free loopback ports, and folders for Unix sockets, for test servers."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

SOCKET_PATH_MAX = 107
"""The longest path a Unix socket's address holds (Linux: 108 bytes with the terminating NUL;
PostgreSQL's limit is the same)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def socket_folder(prefix: str, longest_name: int) -> Path:
    """A new folder for a test server whose Unix sockets (names of up to ``longest_name``
    characters) live in it: in the temporary folder (``TMPDIR``), or in ``/tmp`` where a socket
    there would be too long an address. Under a deep ``TMPDIR`` (a CI runner's workspace, say)
    PostgreSQL, MariaDB and the preloaded python could not bind their sockets, and every test
    that needed one of them failed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if len(os.fsencode(folder)) + 1 + longest_name <= SOCKET_PATH_MAX:
        return folder
    folder.rmdir()
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
