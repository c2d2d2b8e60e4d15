"""A trial keeps how many micro-batches its run accumulated a step (``trials.accumulation_steps``,
from its reports; NULL: one, or not said), so that the server knows which runs reached their
batch size by gradient accumulation. Downgrading drops the column.

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0010"
down_revision = "0009"

upgrade, downgrade = nullable_columns("trials", accumulation_steps=sa.Integer())
