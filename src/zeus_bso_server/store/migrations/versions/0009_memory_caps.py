"""A job keeps, per hardware profile, the smallest batch size that ran out of memory there
(``jobs.memory_caps``, JSON: profile key to batch size); no run on that profile is dispatched at
it or above. NULL: none known. Downgrading drops the column; trials that became ``infeasible``
keep that status.

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0009"
down_revision = "0008"

upgrade, downgrade = nullable_columns("jobs", memory_caps=sa.JSON())
