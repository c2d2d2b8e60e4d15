"""What several revisions do alike. A revision must do the same forever, so what is here never
changes: a new shape of step is a new function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

Step = Callable[[], None]


def nullable_columns(table: str, **columns: sa.types.TypeEngine[Any]) -> tuple[Step, Step]:
    """The upgrade that adds these nullable columns to ``table`` (in this order) and the
    downgrade that drops them (last added first)."""

    def upgrade() -> None:
        with op.batch_alter_table(table) as batch:
            for name, type_ in columns.items():
                batch.add_column(sa.Column(name, type_, nullable=True))

    def downgrade() -> None:
        with op.batch_alter_table(table) as batch:
            for name in reversed(columns):
                batch.drop_column(name)

    return upgrade, downgrade


def job_key() -> sa.Column[str]:
    """A table's ``job_id``, the first half of its primary key: the job's, deleted with it."""
    return sa.Column(
        "job_id",
        sa.String(255),
        sa.ForeignKey("jobs.job_id", ondelete="CASCADE"),
        primary_key=True,
    )


def batch_size_stats_columns() -> list[sa.Column[Any]]:
    """The columns of ``batch_size_stats``, the per-batch-size statistics table of revision
    0001 (revision 0002 moves them onto the job row)."""
    required: dict[str, sa.types.TypeEngine[Any]] = {
        "reports": sa.Integer(),
        "mean_cost": sa.Float(),
        "m2_cost": sa.Float(),
        "converged_count": sa.Integer(),
        "converged_cost_sum": sa.Float(),
    }
    return [
        job_key(),
        sa.Column("batch_size", sa.Integer(), primary_key=True),
        *(sa.Column(name, type_, nullable=False) for name, type_ in required.items()),
        sa.Column("best_converged_cost", sa.Float(), nullable=True),
    ]
