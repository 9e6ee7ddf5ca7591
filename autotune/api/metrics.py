"""Prometheus metrics: requests by route template and status, and what is published.

Labels use the route template (`/v1/deployments/{name}/config`), never the raw path, so a
scanner walking random URLs cannot grow the series without bound: every unknown path counts
under route "unmatched". Each app has a registry of its own (tests build many apps).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autotune.errors import StorageError
from autotune.release.publish import capacity_figures, utc
from autotune.storage import repo
from autotune.storage.db import session_scope

log = logging.getLogger("autotune.api")

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """The app's registry and its request metrics."""

    def __init__(self, engine_of: Callable[[], Engine | None]) -> None:
        self.registry = CollectorRegistry()
        labels = ("method", "route", "status")
        self.requests = Counter("autotune_api_requests", "HTTP requests answered.", labels,
                                registry=self.registry)
        self.latency = Histogram("autotune_api_request_duration_seconds",
                                 "Time to answer an HTTP request.", labels,
                                 buckets=LATENCY_BUCKETS_S, registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(PublishedConfigs(engine_of))

    def observe(self, method: str, route: str, status: int, duration_s: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(duration_s)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class PublishedConfigs(Collector):
    """Read at scrape time: one query over the (few) publications."""

    def __init__(self, engine_of: Callable[[], Engine | None]) -> None:
        self.engine_of = engine_of

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("autotune_api_database_up",
                               "1 if the last scrape could read the database.")
        info = InfoMetricFamily("autotune_published_config",
                                "The current published config of each deployment.",
                                labels=("deployment",))
        capacity = GaugeMetricFamily(
            "autotune_published_capacity_output_tokens_per_second",
            "Capacity under the SLO of the current published config: its confirmed mean, or "
            "its single search measurement where it was not confirmed.",
            labels=("deployment",))
        lcb = GaugeMetricFamily(
            "autotune_published_capacity_lcb_output_tokens_per_second",
            "One-sided 90% lower confidence bound of the current published config's confirmed "
            "capacity (only for a confirmed config).", labels=("deployment",))
        published = GaugeMetricFamily("autotune_published_timestamp_seconds",
                                      "When the current config was published (Unix time).",
                                      labels=("deployment",))
        engine = self.engine_of()
        ok = 0.0
        if engine is not None:
            try:
                with session_scope(engine) as session:
                    for pub in repo.current_publications(session):
                        name = pub.deployment.name
                        figures = capacity_figures(pub)
                        info.add_metric([name], {"period": pub.period_label,
                                                 "campaign": pub.campaign.name,
                                                 "trial": str(pub.trial.number)})
                        capacity.add_metric([name], figures["capacity_output_tok_s"])
                        if figures["confirmed_lcb_output_tok_s"] is not None:
                            lcb.add_metric([name], figures["confirmed_lcb_output_tok_s"])
                        published.add_metric([name], utc(pub.published_at).timestamp())
                ok = 1.0
            except (SQLAlchemyError, StorageError) as exc:
                log.warning("metrics: cannot read publications: %s", str(exc).splitlines()[0])
        up.add_metric([], ok)
        yield up
        if ok:
            yield from (info, capacity, lcb, published)


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request by method, route template and
    status. Outermost, so it sees the 500s the error middleware makes."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_tracking(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.observe(method, route, status, time.perf_counter() - start)
