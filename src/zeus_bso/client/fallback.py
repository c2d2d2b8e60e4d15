"""The batch size a run falls back to when the server cannot be reached at start: the last
recommendation this machine saw for the job, kept in a small file per job
(``$ZEUS_BSO_CACHE_DIR``, else ``~/.cache/zeus-bso``). Reading or writing it never fails a run."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_VARIABLE = "ZEUS_BSO_CACHE_DIR"


def cache_dir() -> Path:
    """Where the recommendations are kept."""
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache" / "zeus-bso"


def _path(job_id: str) -> Path:
    return cache_dir() / f"{hashlib.sha256(job_id.encode()).hexdigest()[:32]}.json"


def remember(job_id: str, batch_size: int) -> None:
    """Keep ``batch_size`` as the job's last recommendation."""
    path = _path(job_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"job_id": job_id, "batch_size": batch_size}))
        temporary.replace(path)
    except OSError as err:
        logger.debug("could not keep the recommendation of %s in %s: %s", job_id, path, err)


def recalled(job_id: str) -> int | None:
    """The job's last recommendation kept here (None: none, or unreadable)."""
    try:
        saved = json.loads(_path(job_id).read_text())
        if saved.get("job_id") == job_id and isinstance(saved.get("batch_size"), int):
            return int(saved["batch_size"])
    except (OSError, ValueError, AttributeError):
        pass
    return None
