"""Hardware profiles: a job remembers the GPUs it ran on, and each trial the one it ran on.

``jobs.profiles`` stays empty (NULL) while a job knows one profile, the one in its
configuration; the trials from before get that profile's name.

Create Date: 2026-11-24
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


_MAX_KEY_LENGTH = 255


def _profile_key(config: dict[str, Any]) -> str:
    """`zeus_bso.spec.profile_key` of a job's configuration as this revision knows it: past
    255 characters (a long GPU model), the model is shortened and a hash of the whole name
    keeps profiles apart, exactly as the server names it."""
    gpus, model, power = config["number_of_gpus"], config["gpu_model"], float(config["max_power"])
    key = f"{gpus}x{model}@{power:g}W"
    if len(key) <= _MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    tail = f"~{digest}@{power:g}W"
    return f"{gpus}x{model}"[: _MAX_KEY_LENGTH - len(tail)] + tail


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("profiles", sa.JSON(), nullable=True))
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("profile", sa.String(255), nullable=True))
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("job_id", sa.String()), sa.column("config", sa.JSON()))
    trials = sa.table("trials", sa.column("job_id", sa.String()), sa.column("profile"))
    for job_id, config in conn.execute(sa.select(jobs.c.job_id, jobs.c.config)).all():
        if isinstance(config, str):  # a driver that hands JSON back as text
            config = json.loads(config)
        key = _profile_key(config)
        conn.execute(sa.update(trials).where(trials.c.job_id == job_id).values(profile=key))


def refuse_downgrade(conn: sa.Connection) -> str | None:
    """Below 0005 a job has one profile: the statistics of a job that ran on several are kept
    in its first profile's units, and its trials' profiles would be lost (an upgrade again would
    put every trial on the last one). Such a downgrade is refused."""
    jobs = sa.table("jobs", sa.column("job_id", sa.String()), sa.column("profiles", sa.JSON()))
    found = conn.execute(
        sa.select(jobs.c.job_id).where(jobs.c.profiles.is_not(None)).order_by(jobs.c.job_id)
    ).scalars()
    ids = list(found)
    if not ids:
        return None
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return (
        f"{len(ids)} job(s) ran on more than one hardware profile ({shown}), which the schema "
        "before 0005 cannot hold without reading their costs in the wrong GPUs' units; delete "
        "those jobs (zeus-bso jobs delete) or keep revision 0005 or later"
    )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("profile")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("profiles")
