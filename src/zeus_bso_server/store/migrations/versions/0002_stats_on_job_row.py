"""Per-batch-size statistics move from their own table onto the job row.

Every request locks the job row; with the statistics on it, the lock brings them along and a
final report updates one row instead of two.

Create Date: 2026-11-22
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

from zeus_bso_server.store.migrations.steps import batch_size_stats_columns

revision = "0002"
down_revision = "0001"

FIELDS = (
    "reports",
    "mean_cost",
    "m2_cost",
    "converged_count",
    "converged_cost_sum",
    "best_converged_cost",
)

jobs = sa.table("jobs", sa.column("job_id", sa.String()), sa.column("stats", sa.JSON()))


def _stats_table() -> sa.TableClause:
    return sa.table(
        "batch_size_stats",
        sa.column("job_id", sa.String()),
        sa.column("batch_size", sa.Integer()),
        *(sa.column(name) for name in FIELDS),
    )


def upgrade() -> None:
    # MySQL takes a JSON column's default only as an expression, in parentheses.
    empty = sa.text("('{}')") if op.get_bind().dialect.name == "mysql" else "{}"
    op.add_column("jobs", sa.Column("stats", sa.JSON(), nullable=False, server_default=empty))
    conn = op.get_bind()
    stats = _stats_table()
    per_job: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in conn.execute(sa.select(stats)).mappings():
        per_job[row["job_id"]][str(row["batch_size"])] = {name: row[name] for name in FIELDS}
    for job_id, values in per_job.items():
        conn.execute(sa.update(jobs).where(jobs.c.job_id == job_id).values(stats=values))
    op.drop_table("batch_size_stats")


def _like_job_ids() -> dict[str, Any]:
    """MySQL: the character set and collation of ``jobs.job_id``, which a foreign key to it must
    share (revision 0003 may have changed them from the database's defaults)."""
    conn = op.get_bind()
    if conn.dialect.name != "mysql":
        return {}
    charset, collation = conn.execute(
        sa.text(
            "SELECT character_set_name, collation_name FROM information_schema.columns"
            " WHERE table_schema = DATABASE() AND table_name = 'jobs' AND column_name = 'job_id'"
        )
    ).one()
    return {"mysql_charset": charset, "mysql_collate": collation}


def downgrade() -> None:
    op.create_table("batch_size_stats", *batch_size_stats_columns(), **_like_job_ids())
    conn = op.get_bind()
    rows = [
        {"job_id": job_id, "batch_size": int(batch_size), **values}
        for job_id, stats in conn.execute(sa.select(jobs.c.job_id, jobs.c.stats))
        for batch_size, values in (stats or {}).items()
    ]
    if rows:
        conn.execute(sa.insert(_stats_table()), rows)
    op.drop_column("jobs", "stats")
