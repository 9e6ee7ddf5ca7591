"""Running a fake upstream and the capture proxy in one event loop, for the unit tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from autotune.capture import CaptureProxy, build_options
from autotune.capture.recorder import FILE_GLOB
from tests.capture.fake_upstream import FakeUpstream


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@dataclass
class Rig:
    upstream_url: str
    proxy_url: str
    proxy: CaptureProxy
    client: aiohttp.ClientSession

    async def post(self, base: str, path: str, body: dict[str, object],
                   headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        async with self.client.post(base + path, data=json.dumps(body).encode(),
                                    headers={"Content-Type": "application/json",
                                             **(headers or {})}) as r:
            return r.status, await r.read()


@asynccontextmanager
async def rig(out_dir: Path, fake: FakeUpstream | None = None, *, upstream_url: str | None = None,
              **flags: object) -> AsyncIterator[Rig]:
    """A fake upstream (unless upstream_url is given), the proxy in front of it, a client."""
    fake = fake or FakeUpstream()
    async with serving(fake.app()) as url:
        options = build_options(upstream=upstream_url or url, listen="127.0.0.1:0",
                                out_dir=out_dir, **flags)  # type: ignore[arg-type]
        proxy = CaptureProxy(options)
        proxy_url = await proxy.start()
        try:
            async with aiohttp.ClientSession(auto_decompress=False) as client:
                yield Rig(upstream_url or url, proxy_url, proxy, client)
        finally:
            await proxy.stop()


def records(out_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for f in sorted(out_dir.glob(FILE_GLOB))
            for line in f.read_text().splitlines()]
