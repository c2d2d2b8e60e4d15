"""The app factory. Nothing happens at import: the engine is built in the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from zeus_bso_server import __version__
from zeus_bso_server.api.auth import TokenMiddleware
from zeus_bso_server.api.body import BodyMiddleware
from zeus_bso_server.api.cross_site import CrossSiteMiddleware
from zeus_bso_server.api.docs_pages import DOCS_URL, OPENAPI_URL, REDOC_URL, STATIC_URL
from zeus_bso_server.api.errors import install_error_handlers
from zeus_bso_server.api.host_check import HostCheckMiddleware
from zeus_bso_server.api.openapi import openapi_of
from zeus_bso_server.api.redirects import PathRedirectMiddleware
from zeus_bso_server.api.routes_dashboard import router as dashboard_router
from zeus_bso_server.api.routes_health import health
from zeus_bso_server.api.routes_jobs import router as jobs_router
from zeus_bso_server.api.routes_protocol import router as protocol_router
from zeus_bso_server.observability import Metrics, RequestContextMiddleware
from zeus_bso_server.service import BatchSizeService
from zeus_bso_server.settings import Settings, load_settings
from zeus_bso_server.store.database import Database
from zeus_bso_server.store.schema import check_schema

CHECKPOINT_SECONDS = 1.0
"""How often a SQLite server copies its write-ahead log into the database, off the requests."""

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application. Settings default to the environment (``ZEUS_BSO_*``, ``.env``)."""
    resolved = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = Database(
            resolved.engine_url,
            busy_timeout_ms=resolved.sqlite_busy_timeout_ms,
            lock_timeout_ms=resolved.lock_timeout_ms,
            echo=resolved.echo_sql,
            background_checkpoints=True,
            password_file=resolved.db_password_file,
        )
        checkpoints = asyncio.create_task(db.checkpoint_every(CHECKPOINT_SECONDS))
        try:
            await check_schema(db)
            if resolved.previous_token is not None:
                logger.warning(
                    "ZEUS_BSO_PREVIOUS_TOKEN is set: the token before the rotation opens the "
                    "server as ZEUS_BSO_TOKEN does; unset it once /metrics' "
                    "zeus_bso_previous_token_requests_total stops growing"
                )
            app.state.db = db
            app.state.service = BatchSizeService(
                db, resolved.lease_seconds, metrics, stable_job_ids=resolved.stable_job_ids
            )
            # Objects alive after start-up live as long as the process: keep them out of the
            # cyclic collector's sweeps, which otherwise show up as latency spikes.
            gc.collect()
            gc.freeze()
            yield
        finally:
            checkpoints.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checkpoints
            db.dispose()

    # FastAPI's own docs pages, with Swagger UI and ReDoc served from here (`docs_pages`).
    app = FastAPIOffline(
        docs_url=DOCS_URL,
        redoc_url=REDOC_URL,
        static_url=STATIC_URL,
        openapi_url=OPENAPI_URL,
        title="zeus-bso",
        version=__version__,
        summary="Batch size optimizer for recurring training jobs (Zeus-compatible API)",
        lifespan=lifespan,
    )
    app.openapi = openapi_of(app)  # type: ignore[method-assign]  # FastAPI's documented way
    app.state.settings = resolved
    install_error_handlers(app)
    app.include_router(protocol_router)
    app.include_router(jobs_router)
    app.include_router(health)
    app.include_router(dashboard_router)

    metrics = Metrics()
    app.state.metrics = metrics
    # Outermost last: every answer, a 401 or 413 too, gets a request id and is counted.
    app.add_middleware(PathRedirectMiddleware)
    app.add_middleware(BodyMiddleware, max_bytes=resolved.max_body_bytes)
    if resolved.token is not None:
        read = resolved.read_token.get_secret_value() if resolved.read_token else None
        previous = resolved.previous_token
        metrics.previous_token_set.set(1 if previous is not None else 0)
        app.add_middleware(
            TokenMiddleware,
            token=resolved.token.get_secret_value(),
            read_token=read,
            previous_token=previous.get_secret_value() if previous is not None else None,
            on_previous=metrics.previous_token.inc,
        )
    # Before the token: a forged request is refused whether or not the browser attached
    # credentials.
    app.add_middleware(CrossSiteMiddleware)
    # A page whose name is rebound to the server's address is same-origin with it. Tokenless
    # on loopback, every request must name the server; otherwise every browser request.
    app.add_middleware(
        HostCheckMiddleware,
        allowed={resolved.host, *resolved.host_names},
        every_request=resolved.token is None and resolved.is_loopback,
    )
    app.add_middleware(RequestContextMiddleware, metrics=metrics)
    return app
