"""A trial keeps what its run was dispatched for: whether it accumulates gradients
(``trials.accumulates``) and whether it was told to profile power limits
(``trials.power_profiling``), so that the server takes a micro-batch's out-of-memory report and a
power profile only from runs that send them (the trials from before keep NULL, not known: both
are taken, as before); and whether it must deliver a model (``trials.must_deliver``: no stop on
its cost; NULL, before: no). Downgrading drops the columns.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0013"
down_revision = "0012"

upgrade, downgrade = nullable_columns(
    "trials", accumulates=sa.Boolean(), power_profiling=sa.Boolean(), must_deliver=sa.Boolean()
)
