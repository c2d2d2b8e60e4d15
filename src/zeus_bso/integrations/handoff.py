"""`OutcomeHandoff`: a run's outcome, from the child process that trained to the process that
called ``fit``.

Lightning's ``ddp_spawn`` and ``ddp_notebook`` strategies train in processes they start (spawned
or forked), each with a copy of the callback: the copy in the caller never sees the fit, so its
``outcome`` stayed None (and `zeus_bso.until_converged` stopped after one run). The main rank's
copy writes the outcome, as JSON, into a private folder the caller's callback made when it was
built (a random name in the temporary folder, created exclusively, mode 0700: no other user can
create, replace or read a file in it); the caller reads it, after checking that the folder and
the file are its own and private, and removes it, when it is asked for the outcome. Processes
that built their own callback (``strategy="ddp"``, ``torchrun``: each process runs the script)
write nothing.

The folder goes with the callback, or at the process's exit; a process killed outright (SIGKILL,
the out-of-memory killer, ``os._exit``) cannot remove it, so its name carries the process's pid
namespace and pid, and the next callback this user builds removes the folders of processes of
its namespace that are gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import stat
import tempfile
import weakref
from pathlib import Path
from typing import Any

from zeus_bso.spec import StopReason
from zeus_bso.training import RunOutcome

logger = logging.getLogger(__name__)


def outcome_fields(outcome: RunOutcome) -> dict[str, Any]:
    """``outcome`` as JSON-ready fields."""
    return dataclasses.asdict(outcome)


def outcome_from(fields: dict[str, Any]) -> RunOutcome:
    """The outcome that `outcome_fields` wrote."""
    reason, shared = StopReason(fields["reason"]), tuple(fields["shared_gpus"])
    return RunOutcome(**{**fields, "reason": reason, "shared_gpus": shared})


OUTCOME_FILE = "outcome.json"
PREFIX = "zeus-bso-outcome-"


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _private(info: os.stat_result) -> bool:
    """Whether a file or folder is this user's and no one else's."""
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)


def _namespace() -> str:
    """This process's pid namespace as Linux numbers it (a pid names a process only within its
    namespace: containers may share a temporary folder); empty where there is no ``/proc``."""
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return ""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: the pid was reused, the folder may stay
        return False
    return False


def sweep(folder: str, namespace: str) -> None:
    """Remove the outcome folders in ``folder`` that this user's processes of ``namespace`` left
    when they were killed: private, this user's, and named for a process that is gone."""
    marker = f"{PREFIX}{namespace}-"
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.startswith(marker):
                    continue
                pid = entry.name.removeprefix(marker).partition("-")[0]
                if not pid.isdigit() or not _gone(int(pid)):
                    continue
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode) and _private(info):
                    shutil.rmtree(entry.path, ignore_errors=True)
    except OSError as err:
        logger.debug("zeus-bso: left-over outcome folders not removed: %s", err)


class OutcomeHandoff:
    """Built in the process that builds the callback; pickled (or forked) with it into the
    processes a launcher starts."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        namespace = _namespace()
        try:
            if namespace:
                sweep(tempfile.gettempdir(), namespace)
            prefix = f"{PREFIX}{namespace}-{self._pid}-" if namespace else PREFIX
            folder = Path(tempfile.mkdtemp(prefix=prefix))  # 0700, made exclusively
        except OSError as err:  # no writable temporary folder (a read-only container)
            logger.debug("zeus-bso: no outcome hand-off: %s", err)
            self._path: Path | None = None
            return
        self._path = folder / OUTCOME_FILE
        # An outcome that nobody asked for goes with the callback (or with this process).
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)

    @property
    def in_child(self) -> bool:
        """Whether this process is not the one that built the callback: a launcher started it."""
        return os.getpid() != self._pid

    def send(self, outcome: RunOutcome) -> None:
        """In a process a launcher started, leave ``outcome`` for the caller (a later fit's
        replaces it); elsewhere, nothing. A failure to write is logged, never raised: the run's
        own work is done."""
        if not self.in_child or self._path is None:
            return
        staged: str | None = None
        try:
            descriptor, staged = tempfile.mkstemp(
                prefix=self._path.stem + "-", suffix=".part", dir=self._path.parent
            )
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                json.dump(outcome_fields(outcome), file)
            os.replace(staged, self._path)
        except OSError as err:
            if staged is not None:
                _remove(Path(staged))
            logger.warning(
                "zeus-bso: could not hand the run's outcome to the process that started it "
                "(%s); callback.outcome stays None there",
                err,
            )

    def receive(self) -> RunOutcome | None:
        """In the process that built the callback, the outcome a started process left (once:
        the file is removed); None if there is none, or if the folder or the file is not this
        user's alone (then nothing in it is believed)."""
        if self.in_child or self._path is None:
            return None
        try:
            folder = os.lstat(self._path.parent)
            descriptor = os.open(self._path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            with os.fdopen(descriptor, encoding="utf-8") as file:
                own = stat.S_ISDIR(folder.st_mode) and _private(folder)
                own = own and stat.S_ISREG(os.fstat(file.fileno()).st_mode)
                own = own and _private(os.fstat(file.fileno()))
                text = file.read() if own else ""
        except OSError:
            return None
        finally:
            _remove(self._path)
        if not own:
            logger.warning(
                "zeus-bso: the run's outcome at %s is not this user's alone: not read",
                self._path,
            )
            return None
        try:
            return outcome_from(json.loads(text))
        except (ValueError, TypeError, KeyError) as err:
            logger.warning("zeus-bso: the run's outcome could not be read back (%s)", err)
            return None
