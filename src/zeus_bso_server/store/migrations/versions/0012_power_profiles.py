"""Power profiles: per job, hardware profile and batch size, the epoch's time and energy at
each GPU power limit, as a run that opted into power limits measured them
(``power_profiles``; deleted with their job). Downgrading drops the table.

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from zeus_bso_server.store.dialects import mysql_binary_collation
from zeus_bso_server.store.tables import ID_LENGTH, REAL, db_now

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.create_table(
        "power_profiles",
        sa.Column("job_id", sa.String(ID_LENGTH), primary_key=True),
        sa.Column("profile", sa.String(ID_LENGTH), primary_key=True),
        sa.Column("batch_size", sa.Integer(), primary_key=True),
        sa.Column("power_limit", REAL, primary_key=True),
        sa.Column("time_per_epoch", REAL, nullable=False),
        sa.Column("energy_per_epoch", REAL, nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("created_at", REAL, server_default=db_now(), nullable=False),
    )
    dialect = op.get_bind().dialect
    if dialect.name == "mysql":  # ids compare as the exact strings, as in jobs and trials (0003)
        collation = mysql_binary_collation(dialect)
        op.execute(
            f"ALTER TABLE power_profiles CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
        )


def downgrade() -> None:
    op.drop_table("power_profiles")
