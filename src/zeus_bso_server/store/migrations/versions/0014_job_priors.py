"""A job seeded from a related job keeps the prior it was given (``jobs.prior``, JSON: the
parent's id, the mode, each batch size's relative cost, the sizes that never converged, the
cost of an epoch and the epochs to converge at each size). NULL: none (every job before).
Downgrading drops the column: a seeded job goes on as a cold one over its runs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("prior", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("prior")
