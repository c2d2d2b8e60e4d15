"""A job keeps, per hardware profile, the smallest batch size that ran out of memory there
(``jobs.memory_caps``, JSON: profile key to batch size); no run on that profile is dispatched at
it or above. NULL: none known. Downgrading drops the column; trials that became ``infeasible``
keep that status.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("memory_caps", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("memory_caps")
