"""A job keeps, by hardware profile, the smallest batch size that ran out of memory while it
trained there although it had trained there before (``jobs.memory_doubts``, JSON: profile key
to batch size): a run of it or a larger size there is tried first, and a second error sets the
memory cap. NULL: none (every job before). Downgrading drops the column.

Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0017"
down_revision = "0016"

upgrade, downgrade = nullable_columns("jobs", memory_doubts=sa.JSON())
