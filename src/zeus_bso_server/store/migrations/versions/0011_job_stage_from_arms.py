"""A job's stage is what its arms say (``bandit`` once it has arms, ``pruning`` before): the
``jobs.stage`` column, which repeated it, goes. Downgrading adds it back, computed from the arms.

Create Date: 2026-11-27
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("stage")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("stage", sa.String(16), nullable=False, server_default="pruning")
        )
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("job_id", sa.String()), sa.column("arms"), sa.column("stage"))
    for job_id, arms in conn.execute(sa.select(jobs.c.job_id, jobs.c.arms)).all():
        if isinstance(arms, str):  # a driver that hands JSON back as text
            arms = json.loads(arms)
        if arms is not None:
            conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(stage="bandit"))
