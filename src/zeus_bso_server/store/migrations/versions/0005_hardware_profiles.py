"""Hardware profiles: a job remembers the GPUs it ran on, and each trial the one it ran on.

``jobs.profiles`` stays empty (NULL) while a job knows one profile, the one in its
configuration; ``trials.profile`` is NULL for trials from before (the job's first profile).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("profiles", sa.JSON(), nullable=True))
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("profile", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("profile")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("profiles")
