"""A changed setting makes a new job: say so when it happens.

A job without an id gets one from a hash of its settings (`stable_job_id`), so a run whose
script changed any of them (the target, ``max_epochs``, the batch sizes) registers a new job,
which learns from scratch: it explores again from the default batch size. That is right (the
costs of the old settings are not the new ones'), but silent, and the exploration is what a
job pays for. When the server registers a new job, `new_job_notice` asks it for the job's view,
whose ``siblings`` are the other jobs of its prefix, the last changed first, with the settings in
which each differs (`zeus_bso.spec.differing_settings`), and names those of the last that ran, so
that whoever changed one sees what it costs and how to keep the old job's history.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from zeus_bso.client.http import ServerClient
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import JobSpecFromClient

if TYPE_CHECKING:
    from zeus_bso.wire.reads import SiblingJob

logger = logging.getLogger(__name__)

_SHOWN = 3
"""Differences named in the notice; the rest are counted."""


def _last_that_ran(client: ServerClient, spec: JobSpecFromClient) -> SiblingJob | None:
    """The other job of ``spec``'s prefix that ran last, as the new job's view names it (None:
    none ran)."""
    siblings = client.job(spec.job_id or "", limit=0).siblings
    return next((s for s in siblings if s.trials > 0), None)


def new_job_notice(client: ServerClient, spec: JobSpecFromClient) -> str | None:
    """What to tell the user when the server has just registered ``spec`` as a new job: which
    settings differ from the job of its prefix that ran last (None: no such job, or the server
    does not say: upstream Zeus's, without a read API, or an older zeus-bso server)."""
    try:
        sibling = _last_that_ran(client, spec)
        if sibling is None:
            return None
        changes = [f"{d.name}: {d.there!r} there, {d.here!r} here" for d in sibling.differences]
    except ZeusBSOError as err:
        logger.debug("zeus-bso: the jobs of prefix %r were not read: %s", spec.job_id_prefix, err)
        return None
    if not changes:
        return None
    named = "; ".join(changes[:_SHOWN])
    if len(changes) > _SHOWN:
        named += f"; and {len(changes) - _SHOWN} more"
    name, runs = sibling.job_id, sibling.trials
    return (
        f"zeus-bso: job {spec.job_id} is new: it learns from scratch, exploring from the default "
        f"batch size again. Its settings differ from those of {name}, the job of this prefix "
        f"that ran last ({runs} run{'s' if runs != 1 else ''}): {named}. To go on with {name}'s "
        f"history, train with its settings (`zeus-bso jobs show {name} --json`)."
    )
