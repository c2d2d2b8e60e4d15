"""The batch size a run falls back to when the server cannot be reached at start: the last
recommendation this machine saw for the job, or the largest below a size that ran out of memory
here (`ran_out_of_memory`), kept in a small file per job (``$ZEUS_BSO_CACHE_DIR``, else
``~/.cache/zeus-bso``; a folder of the user's own in the temporary folder where no home is known:
`cache_dir`). Reading or writing it never fails a run."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "ZEUS_BSO_CACHE_DIR"

_NOWHERE = Path(os.devnull) / "zeus-bso"
"""A cache where nothing can be made (below a device): every write fails, so nothing is kept."""


def cache_dir() -> Path:
    """Where the recommendations are kept: ``$ZEUS_BSO_CACHE_DIR``, else ``~/.cache/zeus-bso``;
    where no home is known (no ``HOME``, and a user id without an entry in the password
    database, as in a container run under an arbitrary user id), `_homeless_cache`."""
    configured = os.environ.get(CACHE_VARIABLE, "").strip()  # a line break from echo, too
    if configured:
        return Path(configured)
    try:
        return Path.home() / ".cache" / "zeus-bso"
    except RuntimeError:  # "Could not determine home directory."
        return _homeless_cache()


@cache
def _homeless_cache() -> Path:
    """``zeus-bso-<uid>`` in the temporary folder, made private to this user, so that the runs
    of a user without a home still share it; where that name is taken by something other than
    this user's private folder, a new private folder for this process alone. Either way a path:
    one where nothing can be made fails its writes (OSError), which the callers take as nothing
    kept."""
    try:
        shared = Path(tempfile.gettempdir()) / f"zeus-bso-{os.getuid()}"
    except OSError:  # no temporary folder can be written either (a read-only filesystem)
        return _NOWHERE
    try:
        shared.mkdir(mode=0o700, exist_ok=True)
        found = shared.lstat()
    except OSError:
        return shared
    mine = found.st_uid == os.getuid() and not found.st_mode & 0o077
    if stat.S_ISDIR(found.st_mode) and mine:
        return shared
    logger.warning(
        "zeus-bso: no home folder here, and %s is not this user's private folder: what this "
        "process keeps (recommendations, undelivered reports) lasts as long as it does; set %s "
        "to keep them across runs",
        shared,
        CACHE_VARIABLE,
    )
    try:
        return Path(tempfile.mkdtemp(prefix="zeus-bso-"))
    except OSError:
        return _NOWHERE


def write_entry(path: Path, entry: Mapping[str, Any]) -> None:
    """Write ``entry`` as JSON at ``path``, whole or not at all: into a file of this process's
    beside it, renamed over it (a reader finds the old entry or the new one, never half of one).

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(entry))
    temporary.replace(path)


def _path(job_id: str) -> Path:
    return cache_dir() / f"{hashlib.sha256(job_id.encode()).hexdigest()[:32]}.json"


def remember(job_id: str, batch_size: int, why: str | None = None) -> None:
    """Keep ``batch_size`` as the job's fallback: its last recommendation, or ``why`` else."""
    path = _path(job_id)
    entry = {"job_id": job_id, "batch_size": batch_size, "why": why}
    try:
        write_entry(path, entry)
    except OSError as err:
        logger.debug("could not keep the recommendation of %s in %s: %s", job_id, path, err)


def recalled(job_id: str) -> int | None:
    """The job's fallback kept here (None: none, or unreadable)."""
    saved = _saved(job_id)
    size = None if saved is None else saved["batch_size"]
    return size if isinstance(size, int) else None


def recalled_why(job_id: str) -> str:
    """Why the job's fallback kept here is what it is, in words."""
    saved = _saved(job_id)
    why = None if saved is None else saved.get("why")
    return why if isinstance(why, str) else "the last recommendation seen on this machine"


def _saved(job_id: str) -> dict[str, object] | None:
    try:
        saved = json.loads(_path(job_id).read_text())
        if saved.get("job_id") == job_id and isinstance(saved.get("batch_size"), int):
            return dict(saved)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def ran_out_of_memory(
    job_id: str, batch_size: int, batch_sizes: Iterable[int], default: int
) -> None:
    """``batch_size`` ran out of memory on this machine: where a run that cannot reach the
    server would fall back to it or a larger size (the last recommendation kept here, else the
    job's ``default``), it falls back to the largest of ``batch_sizes`` below it instead."""
    if (recalled(job_id) or default) < batch_size:
        return
    smaller = [size for size in batch_sizes if size < batch_size]
    if smaller:
        why = f"the largest below {batch_size}, which ran out of memory on this machine"
        remember(job_id, max(smaller), why)
