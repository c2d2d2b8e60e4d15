"""A job can be pinned to a batch size (``jobs.pinned_batch_size``): every run gets it and
nothing is explored, until it is unpinned. NULL: not pinned. Downgrading drops the column (a
pinned job is unpinned).

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0008"
down_revision = "0007"

upgrade, downgrade = nullable_columns("jobs", pinned_batch_size=sa.Integer())
