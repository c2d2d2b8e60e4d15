"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from zeus_bso_server.service import BatchSizeService
from zeus_bso_server.store.database import Database


# Async on purpose: FastAPI runs plain ``def`` dependencies in a thread pool, a hand-off per call.
async def _service(request: Request) -> BatchSizeService:
    service: BatchSizeService = request.app.state.service
    return service


async def _database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


Service = Annotated[BatchSizeService, Depends(_service)]
Db = Annotated[Database, Depends(_database)]


NO_SUCH_JOB: dict[int | str, dict[str, Any]] = {404: {"description": "No such job"}}
"""The documented answer of a route about a job that does not exist."""

NO_SUCH_TRIAL: dict[int | str, dict[str, Any]] = {404: {"description": "No such trial"}}
"""The documented answer of a route about a trial that does not exist."""
