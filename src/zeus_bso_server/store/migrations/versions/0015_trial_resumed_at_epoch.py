"""A trial keeps the epochs its run had reported when it last resumed
(``trials.resumed_at_epoch``): the epochs a resumed run reports next hold the restart's one-off
work (a compile, cold caches), and are judged as a run's first epoch is. NULL: it never resumed
(every trial before). Downgrading drops the column.

Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0015"
down_revision = "0014"

upgrade, downgrade = nullable_columns("trials", resumed_at_epoch=sa.Integer())
