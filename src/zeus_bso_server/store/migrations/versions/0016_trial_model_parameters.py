"""A trial keeps the number of parameters its run trained (``trials.model_parameters``, from its
reports) and the numeric precision it trained in (``trials.precision``, as its framework names
it): its model, so that a job whose runs trained other models says so. NULL: not said (every
trial before). Downgrading drops the columns.

Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0016"
down_revision = "0015"

upgrade, downgrade = nullable_columns(
    "trials", model_parameters=sa.BigInteger(), precision=sa.String(32)
)
