"""A job with two or more hardware profiles keeps its epochs and bandit trials by profile on its
row (``jobs.by_profile``), so that no request reads all its trials.

The column starts NULL: the server counts a job's trials into it once, at its next request
that needs them, and keeps it with every report from then on. Downgrading drops it (it is
derived from the trials, which stay).

Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0007"
down_revision = "0006"

upgrade, downgrade = nullable_columns("jobs", by_profile=sa.JSON())
