"""A changed setting makes a new job: say so when it happens.

A job without an id gets one from a hash of its settings (`stable_job_id`), so a run whose
script changed any of them (the target, ``max_epochs``, the batch sizes) registers a new job,
which learns from scratch: it explores again from the default batch size. That is right (the
costs of the old settings are not the new ones'), but silent, and the exploration is what a
job pays for. When the server registers a new job, `new_job_notice` asks it for the job's view,
whose ``siblings`` are the other jobs of its prefix, the last changed first, with the settings in
which each differs (`zeus_bso.spec.differing_settings`), and names those of the last that ran, so
that whoever changed one sees what it costs and how to keep the old job's history, or start the
next new job from what the old one learned (``prior_from="auto"``). A job seeded from a related
job's curve (``prior_from``) does not learn from scratch: its notice says where it starts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from zeus_bso.client.http import ServerClient
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import JobSpecFromClient

if TYPE_CHECKING:
    from zeus_bso.wire.reads import JobView, SiblingJob

logger = logging.getLogger(__name__)

_SHOWN = 3
"""Differences named in the notice; the rest are counted."""


def _last_that_ran(view: JobView) -> SiblingJob | None:
    """The other job of the new job's prefix that ran last, as its ``view`` names it (None:
    none ran)."""
    return next((s for s in view.siblings if s.trials > 0), None)


def new_job_notice(client: ServerClient, spec: JobSpecFromClient) -> str | None:
    """What to tell the user when the server has just registered ``spec`` as a new job: which
    settings differ from the job of its prefix that ran last, and where the new job starts
    (None: no such job, or the server does not say: upstream Zeus's, without a read API, or an
    older zeus-bso server)."""
    try:
        view = client.job(spec.job_id or "", limit=0)
        sibling = _last_that_ran(view)
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
    seeded = view.seeded_from
    if seeded is not None:
        start = (
            f"is new: it starts from what {seeded.job_id or 'a related job'} learned "
            f"(prior_from, {seeded.mode} mode), not from scratch"
        )
        advice = ""
    elif spec.prior_from is not None:  # "auto", and no job of the prefix had converged
        start = (
            "is new: it learns from scratch, exploring from the default batch size again (no "
            "job of its prefix had a converged run to seed it: prior_from='auto')"
        )
        advice = ""
    else:
        start = "is new: it learns from scratch, exploring from the default batch size again"
        advice = (
            " A new job registered with JobSpec(prior_from='auto') starts from what the last "
            "job of its prefix learned instead."
        )
    return (
        f"zeus-bso: job {spec.job_id} {start}. Its settings differ from those of "
        f"{name}, the job of this prefix that ran last ({runs} run{'s' if runs != 1 else ''}): "
        f"{named}. To go on with {name}'s history, train with its settings "
        f"(`zeus-bso jobs show {name} --json`).{advice}"
    )
