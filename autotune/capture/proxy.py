"""The capture proxy: an OpenAI-compatible reverse proxy that records what passes through.

Every request goes to the upstream with its headers (hop-by-hop ones aside) and body unchanged;
every response comes back unchanged, streams forwarded event by event as they arrive. Only
``POST /v1/completions`` and ``POST /v1/chat/completions`` answered 200 are recorded, after the
response has gone to the client, so recording never delays it:

- a stream whose client did not ask for usage is sent upstream with
  ``stream_options.include_usage=true``, and `autotune.capture.sse` gives the client back the
  stream it would have got without;
- prefix hashes come from the request's token ids, or for a text prompt from the upstream's
  ``/tokenize`` (vLLM's endpoint; the same model, chat template and special tokens as the
  request), asked only when the prompt has at least one full block, and kept only when its count
  equals the usage's ``prompt_tokens`` (else the two tokenisations differ and the hashes would
  lie). When /tokenize fails or disagrees, the record has no hashes.

Not recorded: error responses, requests the upstream could not be reached for (the client gets a
502 with a JSON error), requests whose client went away before the end (the upstream reported no
usage), responses with a Content-Encoding (the proxy does not decompress). Headers are forwarded
and never recorded or logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from autotune.capture.hashing import block_hashes, hash_key, load_or_create_salt
from autotune.capture.options import CaptureOptions
from autotune.capture.recorder import Recorder
from autotune.capture.request_info import RequestInfo, inspect_request
from autotune.capture.sse import StreamTap
from autotune.errors import SettingError
from autotune.traffic.capture_format import CaptureRecord

log = logging.getLogger("autotune.capture")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                         "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
_NOT_FORWARDED_UP = _HOP_BY_HOP | {"host", "content-length"}
_NOT_FORWARDED_DOWN = _HOP_BY_HOP | {"content-length"}
_UPSTREAM_FAILURES = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


def _forward(headers: Mapping[str, str], drop: frozenset[str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in drop:
            out.add(name, value)
    return out


def _int_field(usage: Mapping[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CaptureProxy:
    """Start with `start()` (returns the URL it listens on), end with `stop()`."""

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options
        salt, self.salt_path = load_or_create_salt(options.out_dir, options.salt_file)
        self._key = hash_key(salt)
        self.recorder = Recorder(options.out_dir, rotate_bytes=options.rotate_bytes,
                                 rotate_s=options.rotate_s,
                                 flush_interval_s=options.flush_interval_s)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.counts = {"recorded": 0, "not_recorded": 0, "upstream_unreachable": 0,
                       "tokenize_failed": 0}

    # -- life cycle ------------------------------------------------------------------------------
    async def start(self) -> str:
        # auto_decompress off and no automatic Accept-Encoding/User-Agent: the bytes and headers
        # the client gets are the upstream's own. No connection limit: the proxy must not queue.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application(client_max_size=self.options.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.host, self.options.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            await self._session.close()
            raise SettingError("{listen} {host}:{port}: cannot listen ({why}); choose another "
                               "address or port", host=self.options.host,
                               port=self.options.port, why=exc.strerror) from None
        await self.recorder.start()
        server = site._server  # the bound socket, to learn the port when 0 was asked for
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.options.port
        host = self.options.host if ":" not in self.options.host else f"[{self.options.host}]"
        return f"http://{host}:{port}"

    async def stop(self, grace_s: float = 30.0) -> None:
        """Stop listening, let requests in flight finish (up to grace_s), write the rest."""
        if self._runner is not None:
            await self._runner.shutdown()
            await self._runner.cleanup()
        if self._pending:
            await asyncio.wait(self._pending, timeout=grace_s)
        if self._session is not None:
            await self._session.close()
        await self.recorder.close()

    # -- one request -----------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        arrival_s = time.time()
        body = await request.read()
        info = inspect_request(request.path, body) if request.method == "POST" else None
        assert self._session is not None
        url = self.options.upstream + request.raw_path
        headers = _forward(request.headers, _NOT_FORWARDED_UP)
        try:
            upstream = await self._session.request(
                request.method, url, headers=headers, allow_redirects=False,
                data=info.upstream_body if info is not None else body)
        except _UPSTREAM_FAILURES as exc:
            self.counts["upstream_unreachable"] += 1
            log.warning("capture: upstream %s unreachable for %s %s: %s", self.options.upstream,
                        request.method, request.path, type(exc).__name__)
            return web.json_response(status=502, data={"error": {
                "message": f"the capture proxy could not reach its upstream "
                           f"{self.options.upstream} ({type(exc).__name__})",
                "type": "bad_gateway", "code": 502}})
        async with upstream:  # released (or closed, if unread) whatever happens
            return await self._relay(request, upstream, info, arrival_s)

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse,
                     info: RequestInfo | None, arrival_s: float) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                      headers=_forward(upstream.headers, _NOT_FORWARDED_DOWN))
        recordable = (info is not None and upstream.status == 200
                      and upstream.headers.get("Content-Encoding", "identity") == "identity")
        is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        usage: Mapping[str, Any] | None = None
        try:
            if recordable and not is_sse:  # a whole JSON answer: read it for its usage
                data = await upstream.read()
                response.content_length = len(data)
                await response.prepare(request)
                await response.write(data)
                usage = self._json_usage(data)
            else:
                tap = StreamTap(strip_usage=info.forced_usage) if (
                    recordable and info is not None) else None
                if upstream.content_length is not None and (tap is None or not tap.strip_usage):
                    response.content_length = upstream.content_length
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    out = tap.feed(chunk) if tap is not None else chunk
                    if out:
                        await response.write(out)
                if tap is not None:
                    if rest := tap.finish():
                        await response.write(rest)
                    usage = tap.usage
            await response.write_eof()
        except ConnectionResetError:  # the client went away: drop the upstream request too
            upstream.close()
            self.counts["not_recorded"] += 1
            return response
        except _UPSTREAM_FAILURES as exc:  # the upstream broke off mid-response
            log.warning("capture: upstream broke off %s: %s", request.path, type(exc).__name__)
            self.counts["not_recorded"] += 1
            if request.transport is not None:  # the client must see a cut, not a clean end
                request.transport.close()
            return response
        if info is not None and usage is not None and recordable:
            task = asyncio.create_task(self._record(info, usage, arrival_s,
                                                    request.headers.get("Authorization")))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        elif info is not None:
            self.counts["not_recorded"] += 1
        return response

    @staticmethod
    def _json_usage(data: bytes) -> Mapping[str, Any] | None:
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return None
        usage = obj.get("usage") if isinstance(obj, dict) else None
        return usage if isinstance(usage, dict) else None

    # -- the record, after the response ----------------------------------------------------------
    async def _record(self, info: RequestInfo, usage: Mapping[str, Any], arrival_s: float,
                      authorization: str | None) -> None:
        prompt_tokens = _int_field(usage, "prompt_tokens")
        output_tokens = _int_field(usage, "completion_tokens")
        if prompt_tokens is None or output_tokens is None:
            self.counts["not_recorded"] += 1
            return
        block = self.options.hash_block_tokens
        token_ids = info.token_ids
        if token_ids is None and info.tokenize_body is not None and prompt_tokens >= block:
            token_ids = await self._tokenize(info.tokenize_body, authorization)
            if token_ids is not None and len(token_ids) != prompt_tokens:
                self._tokenize_failed(f"/tokenize counted {len(token_ids)} tokens, the request's "
                                      f"usage {prompt_tokens}")
                token_ids = None
        hashes = block_hashes(token_ids, self._key, block) if token_ids is not None else ()
        self.recorder.add(CaptureRecord(
            ts=round(arrival_s, 6), api=info.api, prompt_tokens=prompt_tokens,
            output_tokens=output_tokens, max_tokens=info.max_tokens, hash_ids=hashes,
            hash_block_tokens=block, priority=info.priority,
            text=info.text if self.options.store_text else None))
        self.counts["recorded"] += 1

    async def _tokenize(self, body: dict[str, Any],
                        authorization: str | None) -> tuple[int, ...] | None:
        assert self._session is not None
        headers = {"Authorization": authorization} if authorization else {}
        try:
            async with self._session.post(
                    self.options.upstream + "/tokenize", json=body, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=self.options.tokenize_timeout_s)) as r:
                if r.status != 200:
                    self._tokenize_failed(f"/tokenize answered {r.status}")
                    return None
                tokens = (await r.json(content_type=None)).get("tokens")
        except (*_UPSTREAM_FAILURES, ValueError, AttributeError) as exc:
            self._tokenize_failed(f"/tokenize failed ({type(exc).__name__})")
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            self._tokenize_failed("/tokenize returned no token list")
            return None
        return tuple(tokens)

    def _tokenize_failed(self, why: str) -> None:
        self.counts["tokenize_failed"] += 1
        if self.counts["tokenize_failed"] in (1, 10, 100) or self.counts["tokenize_failed"] % 1000 == 0:
            log.warning("capture: no prefix hashes for a text prompt: %s (%d so far)", why,
                        self.counts["tokenize_failed"])


async def run_capture(options: CaptureOptions,
                      on_ready: Callable[[str, CaptureProxy], None] | None = None) -> CaptureProxy:
    """Serve until SIGINT or SIGTERM, then finish requests in flight and write the rest."""
    proxy = CaptureProxy(options)
    url = await proxy.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if on_ready is not None:
            on_ready(url, proxy)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
        await proxy.stop()
    return proxy
