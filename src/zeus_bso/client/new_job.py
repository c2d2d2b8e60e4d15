"""A changed setting makes a new job: say so when it happens.

A job without an id gets one from a hash of its settings (`stable_job_id`), so a run whose
script changed any of them (the target, ``max_epochs``, the batch sizes) registers a new job,
which learns from scratch: it explores again from the default batch size. That is right (the
costs of the old settings are not the new ones'), but silent, and the exploration is what a
job pays for. When the server registers a new job, `new_job_notice` finds the job of the same
prefix that ran last and names the settings that differ, so that whoever changed one sees what
it costs and how to keep the old job's history.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from zeus_bso.client.http import ServerClient
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import GPU_FIELDS, JobSpecFromClient

logger = logging.getLogger(__name__)

_NOT_SETTINGS = {"job_id", "job_id_prefix", *GPU_FIELDS}
"""Fields that are not the job's settings: its id, and its GPUs (another hardware profile of
the same job)."""

_SHOWN = 3
"""Differences named in the notice; the rest are counted."""

_SIBLINGS = 100
"""Jobs of the prefix read to find the one that ran last."""


def changed_settings(previous: Mapping[str, Any], spec: JobSpecFromClient) -> list[str]:
    """The settings of ``spec`` that differ from ``previous`` (another job's registered
    configuration, as the server's read API gives it), each as ``name: <there> there, <here>
    here``, in the order of the job's fields. With ``batch_size_range`` the batch sizes are
    made from the range, which is compared instead."""
    here = spec.model_dump(mode="json")
    names = [name for name in type(spec).model_fields if name not in _NOT_SETTINGS]
    if spec.batch_size_range is not None and previous.get("batch_size_range") is not None:
        names.remove("batch_sizes")
    return [
        f"{name}: {previous.get(name)!r} there, {here[name]!r} here"
        for name in names
        if name in previous and previous[name] != here[name]
    ]


def _last_sibling(client: ServerClient, spec: JobSpecFromClient) -> dict[str, Any] | None:
    """The job of ``spec``'s prefix, other than ``spec``'s, that ran last (None: none ran)."""
    jobs = client.list_jobs(prefix=f"{spec.job_id_prefix}-", limit=_SIBLINGS)
    ran = [
        job
        for job in jobs
        if job.get("job_id_prefix") == spec.job_id_prefix
        and job.get("job_id") != spec.job_id
        and int(job.get("trials") or 0) > 0
    ]
    return max(ran, key=lambda job: float(job.get("updated_at") or 0.0), default=None)


def new_job_notice(client: ServerClient, spec: JobSpecFromClient) -> str | None:
    """What to tell the user when the server has just registered ``spec`` as a new job: which
    settings differ from the job of its prefix that ran last (None: no such job, the server
    has no read API, as upstream Zeus's, or it could not be read)."""
    try:
        sibling = _last_sibling(client, spec)
        if sibling is None:
            return None
        previous = client.job_state(str(sibling["job_id"]), limit=0).get("job", {})
    except (ZeusBSOError, KeyError, TypeError, ValueError) as err:
        logger.debug("zeus-bso: the jobs of prefix %r were not read: %s", spec.job_id_prefix, err)
        return None
    changes = changed_settings(previous, spec)
    if not changes:
        return None
    named = "; ".join(changes[:_SHOWN])
    if len(changes) > _SHOWN:
        named += f"; and {len(changes) - _SHOWN} more"
    name, runs = sibling["job_id"], int(sibling.get("trials") or 0)
    return (
        f"zeus-bso: job {spec.job_id} is new: it learns from scratch, exploring from the default "
        f"batch size again. Its settings differ from those of {name}, the job of this prefix "
        f"that ran last ({runs} run{'s' if runs != 1 else ''}): {named}. To go on with {name}'s "
        f"history, train with its settings (`zeus-bso jobs show {name} --json`)."
    )
