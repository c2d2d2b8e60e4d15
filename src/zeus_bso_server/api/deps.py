"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from zeus_bso_server.service import BatchSizeService
from zeus_bso_server.store.database import Database


def _service(request: Request) -> BatchSizeService:
    service: BatchSizeService = request.app.state.service
    return service


def _database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


Service = Annotated[BatchSizeService, Depends(_service)]
Db = Annotated[Database, Depends(_database)]
