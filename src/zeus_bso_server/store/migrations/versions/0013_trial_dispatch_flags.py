"""A trial keeps what its run was dispatched for: whether it accumulates gradients
(``trials.accumulates``) and whether it was told to profile power limits
(``trials.power_profiling``), so that the server takes a micro-batch's out-of-memory report and a
power profile only from runs that send them (the trials from before keep NULL, not known: both
are taken, as before); and whether it must deliver a model (``trials.must_deliver``: no stop on
its cost; NULL, before: no). Downgrading drops the columns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("accumulates", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("power_profiling", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("must_deliver", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("must_deliver")
        batch.drop_column("power_profiling")
        batch.drop_column("accumulates")
