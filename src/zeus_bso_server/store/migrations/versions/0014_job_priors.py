"""A job seeded from a related job keeps the prior it was given (``jobs.prior``, JSON: the
parent's id, the mode, each batch size's relative cost, the sizes that never converged, the
cost of an epoch and the epochs to converge at each size). NULL: none (every job before).
Downgrading drops the column: a seeded job goes on as a cold one over its runs.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0014"
down_revision = "0013"

upgrade, downgrade = nullable_columns("jobs", prior=sa.JSON())
