"""The node's records of the GPU power limits runs changed, and what each GPU goes back to.

One folder per node (`records_folder`: ``$ZEUS_BSO_POWER_RECORDS``, else ``/run/zeus-bso/
power-limits``, which a reboot empties as it resets the GPUs; where that cannot be made, the
user's cache folder). Setting a limit needs ``CAP_SYS_ADMIN``, so the processes that set limits
can write there; mount one host folder there in every container of a node that shares GPUs.

- ``<uuid>.json``: a GPU whose limit a run changed: the process that owns it (PID, start time,
  host, PID namespace), the limit it found, and the limit it goes back to. Written whole or not
  at all (a temporary file, synced, then linked to its name, which fails if the name exists:
  one owner).
- ``operator.json``: the operator's limits, ``{"<uuid>": watts, ...}`` (``"all"`` for every
  GPU): what a GPU goes back to instead of its default limit (NVML's
  ``nvmlDeviceGetPowerManagementDefaultLimit``).

A GPU goes back to the operator's limit, else its default: never to a limit it was found at, which
may be a cap a killed run left (a GPU found below its target with no record is reported, and set
back to the target at the end).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RECORDS_VARIABLE = "ZEUS_BSO_POWER_RECORDS"
"""The node's folder of power-limit records (see the module)."""
NODE_FOLDER = Path("/run/zeus-bso/power-limits")
OPERATOR_FILE = "operator.json"


def records_folder(cache: Path | None = None) -> Path:
    """The node's folder of records: ``$ZEUS_BSO_POWER_RECORDS``, else `NODE_FOLDER` where it
    exists or this process could make it (it is made when a record is first written), else
    ``cache``'s ``power_limits`` (a user's own)."""
    chosen = os.environ.get(RECORDS_VARIABLE, "").strip()
    if chosen:
        return Path(chosen)
    if cache is None or _could_make(NODE_FOLDER):
        return NODE_FOLDER
    return cache / "power_limits"


def _could_make(folder: Path) -> bool:
    """Whether ``folder`` exists and is writable, or its nearest existing parent is."""
    for existing in (folder, *folder.parents):
        if existing.exists():
            return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    return False


@dataclass(frozen=True, slots=True)
class Record:
    """A GPU whose limit a process of this node changed."""

    uuid: str
    target_w: float
    """The limit the GPU goes back to."""
    found_w: float | None
    """Its limit when the process took it."""
    pid: int
    started: str | None
    host: str | None
    pid_namespace: str | None = None
    """The PID namespace of ``pid`` (`pid_namespace`; None: a record written before 0.2)."""

    def mine(self) -> bool:
        """Whether its process is one this process can look up: of this host (or none named),
        and of this PID namespace (or none named). Containers of a node that share the host's
        name (Kubernetes' ``hostNetwork``) have a PID namespace each: a PID of another one's is
        not this one's to find, and its owner may well run."""
        return self.host in (None, socket.gethostname()) and self.pid_namespace in (
            None,
            pid_namespace(),
        )


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]``; None where ``/proc`` cannot say)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


class UnreadableRecordError(Exception):
    """A record that cannot be read (empty after a full disk, or not a record)."""


def path_of(records: Path, uuid: str) -> Path:
    return records / f"{uuid}.json"


def read(path: Path) -> Record:
    """The record at ``path``.

    Raises:
        FileNotFoundError: there is none.
        UnreadableRecordError: it cannot be read.
    """
    try:
        data = json.loads(path.read_text())
        target = data.get("target_w", data.get("original_w"))  # "original_w": before 0.2
        found = data.get("found_w", data.get("original_w"))
        return Record(
            uuid=path.stem,
            target_w=float(target),
            found_w=None if found is None else float(found),
            pid=int(data["pid"]),
            started=data.get("started") if isinstance(data.get("started"), str) else None,
            host=data.get("host") if isinstance(data.get("host"), str) else None,
            pid_namespace=text if isinstance(text := data.get("pid_namespace"), str) else None,
        )
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UnreadableRecordError(f"{path} is not a readable record ({err})") from err


def create(records: Path, record: Record) -> bool:
    """Write ``record`` whole, under its GPU's name, unless one exists there (synced before it
    is named). Returns whether it was written."""
    records.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "target_w": record.target_w,
        "found_w": record.found_w,
        "pid": record.pid,
        "started": record.started,
        "host": record.host,
        "pid_namespace": record.pid_namespace,
    }
    fd, temporary = tempfile.mkstemp(prefix=f".{record.uuid}.", dir=records)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(data, file)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path_of(records, record.uuid))
        except FileExistsError:
            return False
        _sync_folder(records)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def remove(records: Path, uuid: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path_of(records, uuid).unlink()


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def operator_limits(records: Path) -> dict[str, float]:
    """The operator's limits by GPU UUID (``"all"``: every GPU) from ``operator.json``; an
    unreadable file is reported and read as none."""
    path = records / OPERATOR_FILE
    try:
        data = json.loads(path.read_text())
        return {str(uuid): float(watts) for uuid, watts in dict(data).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError) as err:
        logger.warning("zeus-bso: %s cannot be read (%s): GPUs go back to defaults", path, err)
        return {}


def target_of(nvml: Any, handle: Any, uuid: str, operator: dict[str, float]) -> tuple[float, str]:
    """The limit a GPU goes back to (W), and where it comes from: the operator's, within the
    GPU's range, else its default."""
    default = float(nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)) / 1000.0
    chosen = operator.get(uuid, operator.get("all"))
    if chosen is None:
        return default, "its default"
    low, high = (mw / 1000.0 for mw in nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
    if low <= chosen <= high:
        return chosen, "the operator's limit"
    logger.warning(
        "zeus-bso: the operator's limit of GPU %s, %g W, is outside its range (%g-%g W): it "
        "goes back to its default, %g W",
        uuid,
        chosen,
        low,
        high,
        default,
    )
    return default, "its default"
