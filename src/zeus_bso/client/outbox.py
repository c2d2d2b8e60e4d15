"""What a run could not tell the server as it ended, kept on this machine until a later run
reaches the server: its last report and the end of its trial, that its batch size ran out
of memory (the later run then gets a size that fits), that its micro-batches did (these
GPUs' memory cap comes down, and a later run that accumulates does not try them again), or
that it released its trial (it never trained: nothing counts against its batch size). A
database outage of any length then loses no run's result. One small file a trial
(``$ZEUS_BSO_CACHE_DIR/outbox``, else ``~/.cache/zeus-bso/outbox``); keeping or delivering them
never fails a run. One kept for a server that no run here has reached for `KEPT_DAYS` (it moved
to another address, or was retired) is dropped, with a warning, by the next run that delivers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from zeus_bso.client.fallback import cache_dir, write_entry
from zeus_bso.client.http import ServerClient
from zeus_bso.client.server_away import for_later
from zeus_bso.errors import ServerConnectionError, ServerRejectedError, ZeusBSOError
from zeus_bso.spec import TrainingResult, TrialId

logger = logging.getLogger(__name__)

KEPT_DAYS = 30
"""Days an entry for another server waits before a delivering run drops it: long past any
lease, so the server has long ended that trial as abandoned."""


def outbox_dir() -> Path:
    """Where undelivered ends of runs wait."""
    return cache_dir() / "outbox"


def _path(server_url: str, trial: TrialId) -> Path:
    key = f"{server_url.rstrip('/')}\n{trial.job_id}\n{trial.trial_number}"
    return outbox_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def keep(
    server_url: str,
    trial: TrialId,
    report: TrainingResult | None,
    *,
    end: bool,
    infeasible: bool = False,
    micro_batch_size: int | None = None,
    release: str | None = None,
    out_of_memory: bool = False,
) -> bool:
    """Keep ``report`` (the run's last, or None) and whether to end ``trial``, to mark it
    ``infeasible`` (its batch size ran out of memory), or to ``release`` it (why: its run never
    trained), for a later run to deliver to the server at ``server_url``; or, with
    ``micro_batch_size`` alone, that its micro-batches of that size ran out of memory (the trial
    went on). ``out_of_memory``: the release's (`zeus_bso.spec.ReleasedTrial`). A micro-batch mark
    or a release kept before for the trial stays with what is kept after it, and what was kept stays
    with a micro-batch mark. Returns whether it was kept."""
    path = _path(server_url, trial)
    entry: dict[str, Any] = {
        "server_url": server_url.rstrip("/"),
        "trial": trial.model_dump(mode="json"),
        "report": None if report is None else report.model_dump(mode="json"),
        "end": end,
        "infeasible": infeasible,
        "micro_batch_size": micro_batch_size,
        "release": release,
        "release_out_of_memory": out_of_memory,
    }
    before = _read(path)
    if before is not None:
        if release is None and isinstance(before.get("release"), str):
            entry["release"] = before["release"]
            entry["release_out_of_memory"] = bool(before.get("release_out_of_memory"))
        kept_micro = before.get("micro_batch_size")
        if isinstance(kept_micro, int):
            entry["micro_batch_size"] = min(kept_micro, micro_batch_size or kept_micro)
        if micro_batch_size is not None and report is None and not end and not infeasible:
            for key in ("report", "end", "infeasible"):
                entry[key] = before.get(key, entry[key])
    try:
        write_entry(path, entry)
    except OSError as err:
        logger.warning("could not keep the end of trial %s in %s: %s", trial, path, err)
        return False
    return True


def deliver(client: ServerClient) -> int:
    """Deliver what runs kept for ``client``'s server (for each trial, a micro-batch
    out-of-memory mark first, then its report, its end, a batch size's out-of-memory mark and
    its release);
    returns how many were delivered. Stops at the first the server cannot take now (it is
    unreachable, answers 5xx, or something in between answers in its stead:
    `zeus_bso.client.server_away.for_later`); one it refuses for good (a 4xx of its own: the
    job was deleted, say) is dropped with a warning."""
    delivered = 0
    folder = outbox_dir()
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return 0
    for path in paths:
        try:
            entry = json.loads(path.read_text())
            if entry.get("server_url") != client.server_url:
                _drop_if_stale(path, entry)
                continue
            trial = TrialId.model_validate(entry["trial"])
            report = entry.get("report")
            end = bool(entry.get("end"))
            infeasible = bool(entry.get("infeasible"))
            micro = entry.get("micro_batch_size")
            release = entry.get("release")
            out_of_memory = bool(entry.get("release_out_of_memory"))
        except (OSError, ValueError, KeyError, TypeError) as err:
            logger.debug("skipping unreadable outbox entry %s: %s", path, err)
            continue
        try:
            if isinstance(micro, int):
                _deliver_micro_batch_mark(client, trial, micro)
            if report is not None:
                client.report(TrainingResult.model_validate(report))
            if end:
                client.end_trial(trial)
            if infeasible:
                client.infeasible(trial)
            if isinstance(release, str):
                client.release(trial, release or None, out_of_memory=out_of_memory)
        except ServerConnectionError:
            break
        except ServerRejectedError as err:
            if for_later(err):  # away for now, or a page not the server's: kept
                break
            logger.warning("the kept end of trial %s was refused and is dropped: %s", trial, err)
        except ZeusBSOError as err:
            logger.warning("the kept end of trial %s could not be delivered: %s", trial, err)
            break
        else:
            delivered += 1
            logger.info("delivered the kept end of trial %s", trial)
        with contextlib.suppress(OSError):
            path.unlink()
    return delivered


def _deliver_micro_batch_mark(client: ServerClient, trial: TrialId, micro: int) -> None:
    """Deliver that ``trial``'s micro-batches of ``micro`` ran out of memory (idempotent: the
    cap is already that low, or lower, after the first). One the server refuses for good (the
    trial ended before it heard, say) is dropped with a warning, and what else was kept for
    the trial goes on to be delivered.

    Raises:
        ZeusBSOError: the server cannot take it now (`zeus_bso.client.server_away.for_later`).
    """
    try:
        client.infeasible(trial, micro_batch_size=micro)
    except ServerRejectedError as err:
        if for_later(err):
            raise
        logger.warning(
            "the kept mark that micro-batches of %d ran out of memory in trial %s was refused "
            "and is dropped: %s",
            micro,
            trial,
            err,
        )


def _read(path: Path) -> dict[str, Any] | None:
    """The entry kept at ``path`` (None: none, or unreadable)."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _drop_if_stale(path: Path, entry: dict[str, Any]) -> None:
    """Drop ``path``, an entry for another server, once it is `KEPT_DAYS` old."""
    try:
        age_days = (time.time() - path.stat().st_mtime) / 86400
    except OSError:
        return
    if age_days < KEPT_DAYS:
        return
    with contextlib.suppress(OSError):
        path.unlink()
        trial = entry.get("trial") or {}
        logger.warning(
            "dropped the end of trial %s of job %s, kept %d days ago for %s, which no run here "
            "has reached since (a run against a server delivers what is kept for it)",
            trial.get("trial_number"),
            trial.get("job_id"),
            int(age_days),
            entry.get("server_url"),
        )
