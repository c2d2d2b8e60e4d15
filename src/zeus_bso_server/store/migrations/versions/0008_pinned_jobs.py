"""A job can be pinned to a batch size (``jobs.pinned_batch_size``): every run gets it and
nothing is explored, until it is unpinned. NULL: not pinned. Downgrading drops the column (a
pinned job is unpinned).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pinned_batch_size", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pinned_batch_size")
