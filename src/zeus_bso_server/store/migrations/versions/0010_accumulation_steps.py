"""A trial keeps how many micro-batches its run accumulated a step (``trials.accumulation_steps``,
from its reports; NULL: one, or not said), so that the server knows which runs reached their
batch size by gradient accumulation. Downgrading drops the column.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("accumulation_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("accumulation_steps")
