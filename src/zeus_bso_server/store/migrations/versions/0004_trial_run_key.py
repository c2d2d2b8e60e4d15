"""Trials get an optional run key: a run restarted after a crash continues its trial.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("run_key", sa.String(255), nullable=True))
    op.create_index("ix_trials_job_run_key", "trials", ["job_id", "run_key"])


def downgrade() -> None:
    op.drop_index("ix_trials_job_run_key", table_name="trials")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("run_key")
