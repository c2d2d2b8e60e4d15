"""Trials keep their learning curve, and a job with ``learning_curve_stop`` each batch size's
latest converged curves (in ``jobs.stats``, which needs no new column).

Downgrading drops the trials' curves and the batch sizes' curves: a server of the revision before
would not know them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("curve", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("curve")
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("job_id", sa.String()), sa.column("stats", sa.JSON()))
    for job_id, stats in conn.execute(sa.select(jobs.c.job_id, jobs.c.stats)).all():
        if isinstance(stats, str):  # a driver that hands JSON back as text
            stats = json.loads(stats)
        if any("curves" in entry for entry in stats.values()):
            kept = {
                size: {k: v for k, v in e.items() if k != "curves"} for size, e in stats.items()
            }
            conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(stats=kept))
