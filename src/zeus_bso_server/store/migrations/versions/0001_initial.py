"""Initial schema: jobs, trials, per-batch-size statistics.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from zeus_bso_server.store.migrations.steps import batch_size_stats_columns, job_key
from zeus_bso_server.store.tables import db_now

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("job_id_prefix", sa.String(255), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("arms", sa.JSON(), nullable=True),
        sa.Column("bandit_start", sa.Integer(), nullable=True),
        sa.Column("next_trial_number", sa.Integer(), nullable=False),
        sa.Column("best_batch_size", sa.Integer(), nullable=True),
        sa.Column("best_cost", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), server_default=db_now(), nullable=False),
        sa.Column("updated_at", sa.Float(), server_default=db_now(), nullable=False),
    )
    op.create_index("ix_jobs_job_id_prefix", "jobs", ["job_id_prefix"])
    op.create_table(
        "trials",
        job_key(),
        sa.Column("trial_number", sa.Integer(), primary_key=True),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), server_default=db_now(), nullable=False),
        sa.Column("updated_at", sa.Float(), server_default=db_now(), nullable=False),
        sa.Column("lease_expires_at", sa.Float(), nullable=True),
        sa.Column("epochs", sa.Integer(), nullable=True),
        sa.Column("time", sa.Float(), nullable=True),
        sa.Column("energy", sa.Float(), nullable=True),
        sa.Column("metric", sa.Float(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("converged", sa.Boolean(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
    )
    op.create_index("ix_trials_job_status", "trials", ["job_id", "status"])
    op.create_index("ix_trials_job_kind", "trials", ["job_id", "kind"])
    op.create_index(
        "ix_trials_job_bs_status_number",
        "trials",
        ["job_id", "batch_size", "status", "trial_number"],
    )
    op.create_table("batch_size_stats", *batch_size_stats_columns())


def downgrade() -> None:
    op.drop_table("batch_size_stats")
    op.drop_index("ix_trials_job_bs_status_number", table_name="trials")
    op.drop_index("ix_trials_job_kind", table_name="trials")
    op.drop_index("ix_trials_job_status", table_name="trials")
    op.drop_table("trials")
    op.drop_index("ix_jobs_job_id_prefix", table_name="jobs")
    op.drop_table("jobs")
