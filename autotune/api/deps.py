"""Dependencies: a database session per request, and the bearer-token checks."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from autotune.api.errors import ApiError
from autotune.storage.db import session_scope

# auto_error=False: our own 401/403 in the one error shape, not FastAPI's.
bearer = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="The server's AUTOTUNE_API__TOKEN.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def get_engine(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    with session_scope(engine) as session:
        yield session


EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]


def token_matches(given: str, token: str) -> bool:
    """Constant time, and digests first so that not even the token's length leaks."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(),
                               hashlib.sha256(token.encode()).digest())


def _check_bearer(request: Request, credentials: HTTPAuthorizationCredentials | None,
                  what: str) -> str:
    token = request.app.state.settings.api.token
    if not token:
        raise ApiError(403, f"{what} are disabled: set AUTOTUNE_API__TOKEN on the server")
    if credentials is None or not token_matches(credentials.credentials, token):
        raise ApiError(401, "a valid bearer token is needed: Authorization: Bearer <token>",
                       headers={"WWW-Authenticate": "Bearer"})
    return "api"


def require_writer(request: Request, credentials: Credentials) -> str:
    """Writes need `Authorization: Bearer <AUTOTUNE_API__TOKEN>`; with no token configured,
    writes are refused (403)."""
    return _check_bearer(request, credentials, "writes")


def require_reader(request: Request, credentials: Credentials) -> str:
    """With AUTOTUNE_API__PROTECT_READS, reads need the same bearer token as writes. The app
    adds this dependency to its read routes only then, so the OpenAPI document says so."""
    return _check_bearer(request, credentials, "reads")


WriterDep = Annotated[str, Depends(require_writer)]
