"""The FastAPI app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from sqlalchemy import Engine

from autotune import __version__
from autotune.api.deps import require_reader
from autotune.api.docs import install_docs
from autotune.api.errors import CatchUnhandled, install_error_handlers
from autotune.api.metrics import ApiMetrics, RequestMetrics
from autotune.api.routes import campaigns, deployments, health, metrics
from autotune.settings import Settings, get_settings
from autotune.storage.db import make_engine


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(settings.database_url, create=False)
        yield
        app.state.engine.dispose()

    # The docs pages are our own (api/docs.py): FastAPI's load their scripts from CDNs.
    app = FastAPI(title="autotune", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Published vLLM serving configs, tuned for capacity under a P99 SLO. "
                              "Every error is `{\"error\": {\"type\", \"message\"}}`.")
    app.state.settings = settings

    def engine_of() -> Engine | None:
        return getattr(app.state, "engine", None)

    app.state.metrics = ApiMetrics(engine_of)
    install_error_handlers(app)
    # Added last is outermost: the metrics see the 500s that CatchUnhandled makes.
    app.add_middleware(CatchUnhandled)
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)

    # Probes stay open; reads (and the metrics, which name deployments) need the token only
    # with AUTOTUNE_API__PROTECT_READS, and only then does the OpenAPI document say so.
    reads = [Depends(require_reader)] if settings.api.protect_reads else []
    install_docs(app)
    app.include_router(health.router)
    app.include_router(metrics.router, dependencies=reads)
    app.include_router(deployments.router, dependencies=reads)
    app.include_router(campaigns.router, dependencies=reads)
    return app
