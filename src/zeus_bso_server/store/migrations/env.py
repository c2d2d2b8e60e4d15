"""Alembic environment: runs on the connection `zeus_bso_server.store.migrate` hands it."""

from __future__ import annotations

from alembic import context

from zeus_bso_server.store.dialects import dialect_of
from zeus_bso_server.store.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "run migrations with `zeus-bso-server db upgrade`, which supplies the connection"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=dialect_of(connection).rebuilds_tables,
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
