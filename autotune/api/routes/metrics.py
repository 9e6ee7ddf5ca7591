from __future__ import annotations

from fastapi import APIRouter, Request, Response

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}},
                             "description": "Prometheus text exposition format"}})
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests by route template and status; published configs."""
    body, content_type = request.app.state.metrics.exposition()
    return Response(body, media_type=content_type)
