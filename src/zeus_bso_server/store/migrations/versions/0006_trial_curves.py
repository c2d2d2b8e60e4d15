"""Trials keep their learning curve, and a job with ``learning_curve_stop`` each batch size's
latest converged curves (in ``jobs.stats``, which needs no new column).

Downgrading drops the trials' curves and the batch sizes' curves: a server of the revision before
would not know them.

Create Date: 2026-11-24
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0006"
down_revision = "0005"


upgrade, drop_curve = nullable_columns("trials", curve=sa.JSON())


def downgrade() -> None:
    drop_curve()
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
