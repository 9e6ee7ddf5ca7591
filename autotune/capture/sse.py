"""Watching an SSE stream on its way from the upstream to the client.

`StreamTap.feed` takes the upstream's bytes as they arrive and returns the bytes to forward now.
When the client asked for usage itself, that is every byte unchanged, at once; the tap only
reads the usage out of the stream. When the proxy asked for usage on the client's behalf
(`strip_usage`), the tap frames the stream into events and forwards each whole event as soon as
it is complete, except:

- the usage chunk (``"choices":[]`` with a ``usage`` object), which it keeps for the record and
  drops, so the client sees no chunk it did not ask for;
- ``"usage":null`` fields, which OpenAI adds to every chunk once usage is asked for (vLLM does
  not), removed again;
- a terminal chunk (one with a ``finish_reason``), held until the usage chunk: vLLM stamps
  ``system_fingerprint`` on the terminal chunk only when no usage chunk follows, and on the usage
  chunk otherwise, so the tap moves it back where the client would have got it. With n > 1 a
  choice's terminal chunk therefore reaches the client when the last choice finishes.

Only events that can matter are parsed as JSON (a cheap byte test first): the proxy's cost per
chunk stays a few substring searches.
"""

from __future__ import annotations

import json
import re
from typing import Any

_EVENT_END = re.compile(rb"\r?\n\r?\n")
_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null')
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')


def _event_json(event: bytes) -> dict[str, Any] | None:
    """The JSON object in an event's data lines, or None ([DONE], comments, not JSON)."""
    data = b"".join(line[5:].lstrip(b" ") for line in event.splitlines()
                    if line.startswith(b"data:"))
    if not data.startswith(b"{"):
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _usage_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    usage = obj.get("usage")
    return usage if isinstance(usage, dict) else None


def _with_fingerprint(event: bytes, fingerprint: str) -> bytes:
    """The terminal event with `system_fingerprint` as vLLM writes it there: the object's last
    field (pydantic's field order: id, object, created, model, choices, usage,
    system_fingerprint; usage is unset on a terminal chunk)."""
    if b'"system_fingerprint"' in event:
        return event
    end = event.rfind(b"}")
    if end < 0:
        return event
    field = b',"system_fingerprint":' + json.dumps(fingerprint, ensure_ascii=False).encode()
    return event[:end] + field + event[end:]


class StreamTap:
    def __init__(self, *, strip_usage: bool) -> None:
        self.strip_usage = strip_usage
        self.usage: dict[str, Any] | None = None  # the last usage object seen
        self._buffer = b""
        self._held: list[bytes] = []

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        if not self.strip_usage:
            self._scan_only()
            return data
        out: list[bytes] = []
        while (m := _EVENT_END.search(self._buffer)) is not None:
            event, self._buffer = self._buffer[:m.end()], self._buffer[m.end():]
            out.append(self._event(event))
        return b"".join(out)

    def finish(self) -> bytes:
        """What is left when the upstream closes: held chunks and a last unterminated event."""
        rest = b"".join(self._held) + (self._buffer if self.strip_usage else b"")
        self._held, self._buffer = [], b""
        return rest

    def _scan_only(self) -> None:
        while (m := _EVENT_END.search(self._buffer)) is not None:
            event, self._buffer = self._buffer[:m.start()], self._buffer[m.end():]
            if b'"usage"' in event and (obj := _event_json(event)) and (u := _usage_of(obj)):
                self.usage = u

    def _event(self, event: bytes) -> bytes:
        if b'"usage"' in event:
            event = _USAGE_NULL.sub(b"", event)
            obj = _event_json(event) if b'"usage"' in event else None
            if obj is not None and (usage := _usage_of(obj)) is not None and not obj.get("choices"):
                self.usage = usage
                held, self._held = self._held, []
                fingerprint = obj.get("system_fingerprint")
                if isinstance(fingerprint, str):
                    held = [_with_fingerprint(e, fingerprint) for e in held]
                return b"".join(held)  # the usage chunk itself is dropped
        if self._held or _FINISHED.search(event):
            self._held.append(event)  # later events wait too: the client's order is kept
            return b""
        return event
