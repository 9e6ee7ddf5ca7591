"""The FastAPI app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from api.routes import campaigns, deployments, health
from autotune import __version__
from autotune.errors import AutotuneError, NotFoundError, StorageError
from autotune.settings import Settings, get_settings
from autotune.storage.db import make_engine


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"type": kind, "message": message}})


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(settings.database_url)
        yield
        app.state.engine.dispose()

    app = FastAPI(title="autotune", version=__version__, lifespan=lifespan,
                  description="Published vLLM serving configs, tuned for capacity under a P99 SLO.")
    app.state.settings = settings

    @app.exception_handler(AutotuneError)
    async def _autotune_error(_: Request, exc: AutotuneError) -> JSONResponse:
        status = 404 if isinstance(exc, NotFoundError) else 503 if isinstance(
            exc, StorageError) else 400
        return _error(status, type(exc).__name__, str(exc))

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, "HTTPError", str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "ValidationError", str(exc.errors()[0].get("msg", "invalid request")))

    app.include_router(health.router)
    app.include_router(deployments.router)
    app.include_router(campaigns.router)
    return app
