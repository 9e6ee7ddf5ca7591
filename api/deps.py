"""Dependencies: a database session per request, from the engine the app holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from autotune.storage.db import session_scope


def get_engine(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    with session_scope(engine) as session:
        yield session


EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]


def require_writer(request: Request) -> str:
    """Writes need `Authorization: Bearer <AUTOTUNE_API__TOKEN>`; with no token configured,
    writes are refused. Compared in constant time."""
    import hmac

    from fastapi import HTTPException

    token = request.app.state.settings.api.token
    if not token:
        raise HTTPException(403, "writes are disabled: set AUTOTUNE_API__TOKEN on the server")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(401, "a valid bearer token is needed: Authorization: Bearer <token>")
    return "api"


WriterDep = Annotated[str, Depends(require_writer)]
