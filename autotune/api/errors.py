"""One JSON shape for every error the API answers: `{"error": {"type": ..., "message": ...}}`.

`type` is stable and machine-readable; `message` is one line for people, saying what was wrong
and how to fix it.

    AutotuneError subclass    its class name (NotFoundError 404, ConfigError 400,
                              StorageError and InfrastructureError 503, any other 500)
    ApiError / HTTPException  the status phrase in CamelCase: NotFound, MethodNotAllowed,
                              Unauthorized, Forbidden, ... (headers such as Allow kept)
    RequestValidationError    ValidationError, 422, every bad field named in the message
    sqlalchemy OperationalError  DatabaseUnavailable, 503 (server down, file gone, locked)
    anything else             InternalError, 500; logged with its traceback, never sent
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autotune.errors import (
    AutotuneError,
    ConfigError,
    InfrastructureError,
    NotFoundError,
    StorageError,
)

log = logging.getLogger("autotune.api")

INTERNAL_MESSAGE = "internal server error; the server's log has the details"


class ApiError(HTTPException):
    """An HTTP error the API raises on purpose, with a message that says how to fix it."""


def error_type(status_code: int) -> str:
    try:
        return "".join(HTTPStatus(status_code).phrase.title().split()).replace("-", "")
    except ValueError:
        return "HTTPError"


def error_response(status_code: int, kind: str, message: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status_code, headers=headers,
                        content={"error": {"type": kind, "message": message}})


def autotune_status(exc: AutotuneError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConfigError):
        return 400
    if isinstance(exc, StorageError | InfrastructureError):
        return 503
    return 500


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg")))
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AutotuneError)
    async def _autotune_error(_: Request, exc: AutotuneError) -> JSONResponse:
        status = autotune_status(exc)
        if status == 500:
            log.error("unexpected %s: %s", type(exc).__name__, exc)
        return error_response(status, type(exc).__name__, str(exc))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":  # the router's: no such route
            message = f"no route {request.url.path}; the API is described at /docs"
        elif exc.status_code == 405 and message == "Method Not Allowed":
            message = (f"{request.method} is not allowed on {request.url.path}; "
                       f"allowed: {(exc.headers or {}).get('allow', 'see /docs')}")
        return error_response(exc.status_code, error_type(exc.status_code), message,
                              headers=dict(exc.headers) if exc.headers else None)

    @app.exception_handler(OperationalError)
    async def _database_error(request: Request, exc: OperationalError) -> JSONResponse:
        # The driver's text can hold SQL and parameters: it goes to the log, not the client.
        log.error("database error answering %s %s: %s", request.method, request.url.path,
                  str(exc.orig or exc).strip().splitlines()[0])
        return error_response(503, "DatabaseUnavailable",
                              "the database cannot be used right now; /readyz says why")

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "ValidationError", _validation_message(exc))


class CatchUnhandled:
    """ASGI middleware: an exception nothing else handled becomes the JSON 500 (the traceback
    goes to the `autotune.api` log, never to the client)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        except Exception:
            log.exception("unhandled error answering %s %s", scope.get("method"),
                          scope.get("path"))
            if started:  # too late for a JSON body; the server closes the connection
                raise
            response = error_response(500, "InternalError", INTERNAL_MESSAGE)
            await response(scope, receive, send)
