"""MySQL and MariaDB: double-precision numbers, and ids compared as the exact strings they are.

- SQLAlchemy's ``Float`` is ``FLOAT`` on MySQL: single precision, so a time in seconds since
  the epoch was stored to within about two minutes and leases did not expire on time. The
  floating-point columns become ``DOUBLE``.
- The tables took the server's default character set (often latin1, which cannot store most of
  Unicode) and a case-insensitive collation, under which the ids ``Job`` and ``job`` are one
  key. They become utf8mb4 with a binary collation that does not pad: ids compare as the exact
  strings, as on PostgreSQL and SQLite.

On PostgreSQL (``FLOAT`` is double precision there) and SQLite (8-byte reals, binary strings)
this revision changes nothing. Its downgrade restores ``FLOAT`` and keeps the character set,
which holds everything the old one did.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from zeus_bso_server.store.dialects import mysql_binary_collation

revision = "0003"
down_revision = "0002"

# (table, column, nullable) of every floating-point column.
FLOAT_COLUMNS = (
    ("jobs", "best_cost", True),
    ("jobs", "created_at", False),
    ("jobs", "updated_at", False),
    ("trials", "created_at", False),
    ("trials", "updated_at", False),
    ("trials", "lease_expires_at", True),
    ("trials", "time", True),
    ("trials", "energy", True),
    ("trials", "metric", True),
    ("trials", "cost", True),
)
TIMES = ("created_at", "updated_at")


def _on_mysql() -> bool:
    return bool(op.get_bind().dialect.name == "mysql")


def _retype(to: sa.types.TypeEngine[float], was: sa.types.TypeEngine[float]) -> None:
    for table, column, nullable in FLOAT_COLUMNS:
        # MySQL's MODIFY restates the whole column: the clock default of the times goes along.
        clock = sa.text("unix_timestamp(now(6))") if column in TIMES else None
        op.alter_column(
            table,
            column,
            type_=to,
            existing_type=was,
            existing_nullable=nullable,
            existing_server_default=clock,
        )


def upgrade() -> None:
    if not _on_mysql():
        return
    _retype(sa.Double(), sa.Float())
    collation = mysql_binary_collation(op.get_bind().dialect)
    # A column a foreign key joins cannot change its character set: trials.job_id's key to
    # jobs.job_id goes while both tables convert, and comes back as it was.
    keys = sa.inspect(op.get_bind()).get_foreign_keys("trials")
    for key in keys:
        assert key["name"] is not None, "MySQL names every foreign key"
        op.drop_constraint(key["name"], "trials", type_="foreignkey")
    for table in ("jobs", "trials"):
        op.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}")
    for key in keys:
        op.create_foreign_key(
            key["name"],
            "trials",
            key["referred_table"],
            key["constrained_columns"],
            key["referred_columns"],
            ondelete=key.get("options", {}).get("ondelete"),
        )


def downgrade_notice(conn: sa.Connection) -> str | None:
    """What the schema before this revision keeps less precisely on MySQL and MariaDB."""
    if conn.dialect.name != "mysql":
        return None
    return (
        "MySQL and MariaDB store single-precision numbers: times to within about two minutes "
        "(leases may expire late), metrics and costs to about seven significant digits"
    )


def downgrade() -> None:
    if _on_mysql():
        _retype(sa.Float(), sa.Double())
