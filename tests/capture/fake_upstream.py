"""A small, fast OpenAI-compatible server for the proxy's unit tests and its benchmark.

It answers /v1/completions and /v1/chat/completions at once, streamed or not, the way vLLM 0.32
does: usage on whole answers; on streams a final ``"choices":[]`` usage chunk only when
``stream_options.include_usage`` is true, and ``system_fingerprint`` on the terminal chunk when
no usage chunk follows (on the usage chunk otherwise). /tokenize splits on whitespace with one
token id per word. Every request's headers and body are kept in `seen` for the tests to check.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

FINGERPRINT = "vllm-0.32.0-fake1234"


def word_ids(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % 30000 + 10 for w in text.split()]


def prompt_tokens_of(req: dict[str, Any]) -> int:
    if "messages" in req:
        return sum(len(word_ids(m.get("content") or "")) for m in req["messages"]) + 3
    prompt = req.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return len(prompt)
    return len(word_ids(prompt if isinstance(prompt, str) else ""))


@dataclass
class FakeUpstream:
    tokens_out: int = 4  # output tokens per answer (max_tokens wins when smaller)
    openai_style: bool = False  # "usage": null on every chunk once usage is asked for
    tokenize_status: int = 200
    seen: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completion)
        app.router.add_post("/v1/chat/completions", self.completion)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        self.seen.append((request.path_qs, dict(request.headers), b""))
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((request.path, dict(request.headers), body))
        if self.tokenize_status != 200:
            return web.json_response({"error": "no"}, status=self.tokenize_status)
        req = json.loads(body)
        if "messages" in req:
            ids = [1, 2, 3] + [t for m in req["messages"] for t in word_ids(m.get("content") or "")]
        else:
            ids = word_ids(req["prompt"])
        return web.json_response({"count": len(ids), "max_model_len": 4096, "tokens": ids})

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.path, dict(request.headers), body))
        req = json.loads(body)
        if req.get("model") == "missing":
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        chat = request.path.endswith("/chat/completions")
        limit = req.get("max_completion_tokens") or req.get("max_tokens") or self.tokens_out
        n_out = min(self.tokens_out, int(limit))
        usage = {"prompt_tokens": prompt_tokens_of(req), "completion_tokens": n_out,
                 "total_tokens": prompt_tokens_of(req) + n_out}
        head = {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": 1, "model": "fake"}
        if not req.get("stream"):
            text = " tok" * n_out
            choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant",
                                                               "content": text}} if chat
                                      else {"index": 0, "text": text})
            return web.json_response({**head, "object": "chat.completion" if chat
                                      else "text_completion", "choices": [
                                          {**choice, "finish_reason": "length"}],
                                      "usage": usage, "system_fingerprint": FINGERPRINT})
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)

        async def send(obj: dict[str, Any]) -> None:
            if include_usage and self.openai_style and "usage" not in obj:
                obj = {**obj, "usage": None}
            await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

        for i in range(n_out):
            last = i == n_out - 1
            delta = {"content": " tok"} if chat else None
            choice = ({"index": 0, "delta": delta} if chat else {"index": 0, "text": " tok"})
            chunk: dict[str, Any] = {**head, "choices": [
                {**choice, "finish_reason": "length" if last else None}]}
            if last and not include_usage:
                chunk["system_fingerprint"] = FINGERPRINT
            await send(chunk)
        if include_usage:
            await send({**head, "choices": [], "usage": usage, "system_fingerprint": FINGERPRINT})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
