"""A job's id and a run's key: how every recurrence of a job, and every restart of a run, finds
its history without ids copied around.

A job without an id is ``<prefix>-<8 hex>`` from a hash of its settings (not its GPUs: on others
it is the same job on another hardware profile), so every recurrence of the same job finds the
same history; change any setting and it is a new job, which learns from scratch (the run says
so, naming the settings that changed: `zeus_bso.client.new_job`).
"""

from __future__ import annotations

import os

from zeus_bso.spec import stable_job_id

__all__ = ["RUN_KEY_VARIABLE", "run_key_from_environment", "stable_job_id"]

RUN_KEY_VARIABLE = "ZEUS_BSO_RUN_KEY"


def run_key_from_environment() -> str | None:
    """This run's name from the environment: ``ZEUS_BSO_RUN_KEY``, else torchrun's run id
    (``TORCHELASTIC_RUN_ID``, the same across the elastic restarts of one launch; its default
    ``none`` is not a name). None without either."""
    explicit = os.environ.get(RUN_KEY_VARIABLE, "").strip()
    if explicit:
        return explicit
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}"
    return None
