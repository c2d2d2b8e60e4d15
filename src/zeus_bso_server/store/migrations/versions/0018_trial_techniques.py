"""A trial keeps the ways of training its run used beside its model and precision
(``trials.techniques``: `zeus_bso.spec.Technique` values, sorted and joined by commas; empty:
none), from its reports: activation checkpointing and a compiled model change what a batch size
costs, so a job whose runs trained otherwise says so. NULL: not said (every trial before).
Downgrading drops the column.

Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa

from zeus_bso_server.store.migrations.steps import nullable_columns

revision = "0018"
down_revision = "0017"

upgrade, downgrade = nullable_columns("trials", techniques=sa.String(64))
