"""What the proxy reads from a client's request body, and the body it sends upstream instead.

The upstream gets the client's bytes unchanged, except on a stream whose client did not ask for
usage: there the body is re-encoded with ``stream_options.include_usage=true`` (and the usage
chunk is taken out of the response again, see `autotune.capture.sse`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["chat", "completion"]
RECORDED_PATHS: dict[str, Api] = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
# Chat request fields that change how vLLM renders the prompt; /tokenize takes the same ones.
_CHAT_TEMPLATE_FIELDS = ("add_generation_prompt", "continue_final_message", "add_special_tokens",
                         "chat_template", "chat_template_kwargs", "tools")


@dataclass(frozen=True)
class RequestInfo:
    api: Api
    stream: bool
    forced_usage: bool  # the proxy asked for usage the client did not ask for
    upstream_body: bytes
    max_tokens: int | None
    priority: int | None
    token_ids: tuple[int, ...] | None  # the prompt, when the client sent token ids
    tokenize_body: dict[str, Any] | None  # a /tokenize request for a text prompt
    text: str | None  # the prompt as text (stored only with --store-text)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _token_list(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 32 for t in value):
        return tuple(value)
    return None


def _message_text(messages: list[Any]) -> str | None:
    """The text of chat messages, joined by newlines (roles dropped): what the replayer sends
    as one user message."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content
                      if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(parts) if parts else None


def inspect_request(path: str, body: bytes) -> RequestInfo | None:
    """The request's facts, or None where the body is not a JSON object (the upstream will
    refuse it; the proxy passes it on and records nothing)."""
    api = RECORDED_PATHS.get(path)
    if api is None:
        return None
    try:
        req = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(req, dict):
        return None
    stream = req.get("stream") is True
    options = req.get("stream_options")
    forced = stream and not (isinstance(options, dict) and options.get("include_usage") is True)
    upstream_body = body
    if forced:
        new_options = dict(options) if isinstance(options, dict) else {}
        new_options["include_usage"] = True
        upstream_body = json.dumps({**req, "stream_options": new_options},
                                   ensure_ascii=False).encode()
    max_tokens = _int_or_none(req.get("max_completion_tokens"))
    if max_tokens is None:
        max_tokens = _int_or_none(req.get("max_tokens"))
    token_ids: tuple[int, ...] | None = None
    tokenize: dict[str, Any] | None = None
    text: str | None = None
    model = {"model": req["model"]} if isinstance(req.get("model"), str) else {}
    if api == "completion":
        prompt = req.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:  # a batch of one
            prompt = prompt[0]
        if isinstance(prompt, str):
            text = prompt
            tokenize = {**model, "prompt": prompt}
            if isinstance(req.get("add_special_tokens"), bool):
                tokenize["add_special_tokens"] = req["add_special_tokens"]
        else:
            token_ids = _token_list(prompt)  # None for batches: no hashes (see README)
    elif isinstance(req.get("messages"), list):
        text = _message_text(req["messages"])
        tokenize = {**model, "messages": req["messages"]}
        tokenize.update({k: req[k] for k in _CHAT_TEMPLATE_FIELDS if k in req})
    return RequestInfo(api=api, stream=stream, forced_usage=forced, upstream_body=upstream_body,
                       max_tokens=max_tokens, priority=_int_or_none(req.get("priority")),
                       token_ids=token_ids, tokenize_body=tokenize, text=text)
