"""Trials get an optional run key: a run restarted after a crash continues its trial.

Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("run_key", sa.String(255), nullable=True))
    op.create_index("ix_trials_job_run_key", "trials", ["job_id", "run_key"])


def downgrade_notice(conn: sa.Connection) -> str | None:
    """Below 0004 trials have no run key: an open trial's run, restarted, starts a new trial
    instead of continuing it (the open one is abandoned when its lease runs out)."""
    trials = sa.table("trials", sa.column("run_key", sa.String()), sa.column("status", sa.String()))
    open_with_key = (
        sa.select(sa.func.count())
        .select_from(trials)
        .where(trials.c.run_key.is_not(None), trials.c.status.in_(("dispatched", "abandoned")))
    )
    count = conn.execute(open_with_key).scalar_one()
    if not count:
        return None
    return (
        f"{count} open trial(s) lose their run key: restarted, their runs start new trials "
        "instead of continuing them (the open ones are abandoned when their leases run out)"
    )


def downgrade() -> None:
    op.drop_index("ix_trials_job_run_key", table_name="trials")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("run_key")
