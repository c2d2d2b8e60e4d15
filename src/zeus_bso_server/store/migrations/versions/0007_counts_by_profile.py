"""A job with two or more hardware profiles keeps its epochs and bandit trials by profile on its
row (``jobs.by_profile``), so that no request reads all its trials.

The column starts NULL: the server counts a job's trials into it once, at its next request
that needs them, and keeps it with every report from then on. Downgrading drops it (it is
derived from the trials, which stay).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("by_profile", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("by_profile")
