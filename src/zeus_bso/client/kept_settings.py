"""Settings of a job that the server did not keep: say so at registration.

A server answers a registration with the job as it keeps it. A server that does not know an
option (upstream Zeus's, or a zeus-bso server older than this client) drops it without a word,
and its answer, read here, holds the option's default: a platform's per-run cap
(``max_run_cost_ratio``), a horizon (``expected_recurrences``) or a related job's curve
(``prior_from``) would then have no effect, while the script says otherwise. `unkept` compares
what was sent with what was kept, value by value, so no server needs to declare anything.
"""

from __future__ import annotations

from zeus_bso.spec import SEED_SETTINGS, CreatedJob, JobSpecFromClient, policy_options


def unkept(sent: JobSpecFromClient, kept: CreatedJob, created: bool) -> list[str]:
    """The job options of ``sent`` that the registered job (``kept``) does not hold, each as
    ``name (sent X, kept Y)``: those the server does not know. Where the job existed
    (``created`` False), it keeps its own seed settings (`SEED_SETTINGS`), which are left
    out."""
    names = [*policy_options(), *(SEED_SETTINGS if created else ())]
    return [
        f"{name} (sent {getattr(sent, name)!r}, kept {getattr(kept, name)!r})"
        for name in names
        if getattr(sent, name) != getattr(kept, name)
    ]


def unkept_notice(job_id: str, settings: list[str]) -> str:
    """What to tell the user of the ``settings`` the server did not keep."""
    return (
        f"zeus-bso: the server did not keep these settings of job {job_id}: "
        f"{'; '.join(settings)}. It does not know them (upstream Zeus's server, or a zeus-bso "
        "server older than this client), so they have no effect on its decisions: upgrade the "
        "server for them to take effect"
    )
