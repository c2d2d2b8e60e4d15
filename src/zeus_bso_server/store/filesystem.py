"""Which filesystem holds the SQLite file, and whether it is a network one.

SQLite's locks and its write-ahead log's shared memory hold only among processes of one machine
on a local disk: two machines that open a file on a network filesystem (an NFS-backed volume
mounted by a pod on each of two nodes, an old pod and a new one during a rolling update) can
corrupt it, and some (Lustre mounted without ``flock``) refuse SQLite's locks outright, which it
reports as "disk I/O error". A server that finds its file on one says so when it opens it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)

MOUNTINFO = Path("/proc/self/mountinfo")
"""Linux's list of this process's mounts (``proc(5)``)."""

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p",
        "ceph", "fuse.ceph", "glusterfs", "fuse.glusterfs", "lustre", "gpfs", "beegfs",
        "ocfs2", "gfs2", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone",
        "fuse.juicefs", "fuse.mountpoint-s3", "fuse.blobfuse2", "fuse.goofys",
    }
)  # fmt: skip
"""Filesystem types (as ``/proc/self/mountinfo`` names them) whose files other machines share."""


class Mount(NamedTuple):
    point: Path
    type: str
    source: str


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_of(path: Path, mountinfo: Path = MOUNTINFO) -> Mount | None:
    """The mount that holds ``path`` (which need not exist yet): the deepest mount point above
    it, the last mounted where several share one. None where ``mountinfo`` cannot be read (not
    Linux) or names no mount above it."""
    try:
        lines = mountinfo.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    target = path.resolve()
    found: Mount | None = None
    for line in lines:
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        rest = fields[fields.index("-", 6) + 1 :]
        if len(rest) < 2:
            continue
        point = Path(_unescape(fields[4]))
        if point != target and point not in target.parents:
            continue
        if found is None or len(point.parts) >= len(found.point.parts):
            found = Mount(point, rest[0], _unescape(rest[1]))
    return found


_warned: set[Path] = set()
"""The files this process warned of (the server's start opens its database twice: to upgrade
the schema, then to serve)."""


def warn_if_networked(path: Path, mountinfo: Path = MOUNTINFO) -> Mount | None:
    """Logs a warning, once a process, where the SQLite file ``path`` is on a network
    filesystem; returns that filesystem's mount (None: a local one, or unknown)."""
    mount = mount_of(path, mountinfo)
    if mount is None or mount.type not in NETWORK_FILESYSTEMS:
        return None
    if path in _warned:
        return mount
    _warned.add(path)
    logger.warning(
        "the SQLite database %s is on a network filesystem (%s from %s, mounted at %s): SQLite "
        "is safe there only while every process that opens the file runs on this machine; two "
        "machines that open it (replicas, or an old and a new pod during an update) can corrupt "
        "it, and some such filesystems refuse its locks ('disk I/O error'). Keep the file on a "
        "local disk (a block-storage volume), or use PostgreSQL "
        "(ZEUS_BSO_DATABASE_URL=postgresql://...)",
        path,
        mount.type,
        mount.source,
        mount.point,
    )
    return mount
