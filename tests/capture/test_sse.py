"""The stream tap on its own: arbitrary chunking gives the same bytes and the same usage."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.capture.sse import StreamTap

FP = "vllm-0.32.0-abcd1234"


def _chunk(text: str, finish: str | None, fp: bool = False) -> bytes:
    obj = {"id": "c", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if fp:
        obj["system_fingerprint"] = FP
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


USAGE = (b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[],'
         b'"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12},'
         b'"system_fingerprint":"' + FP.encode() + b'"}\n\n')
DONE = b"data: [DONE]\n\n"
# What vLLM sends with include_usage, and what it would have sent without.
WITH_USAGE = _chunk("a", None) + _chunk("b", None) + _chunk("c", "length") + USAGE + DONE
WITHOUT_USAGE = _chunk("a", None) + _chunk("b", None) + _chunk("c", "length", fp=True) + DONE


def _run(tap: StreamTap, data: bytes, cuts: list[int]) -> bytes:
    out, last = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out.append(tap.feed(data[last:cut]))
        last = cut
    return b"".join(out) + tap.finish()


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(WITH_USAGE)), max_size=12))
def test_stripping_gives_the_stream_without_usage_however_it_is_cut(cuts: list[int]) -> None:
    tap = StreamTap(strip_usage=True)
    assert _run(tap, WITH_USAGE, cuts) == WITHOUT_USAGE
    assert tap.usage == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(WITH_USAGE)), max_size=12))
def test_scanning_forwards_every_byte_at_once(cuts: list[int]) -> None:
    tap = StreamTap(strip_usage=False)
    pieces = []
    last = 0
    for cut in sorted(set(cuts)) + [len(WITH_USAGE)]:
        piece = WITH_USAGE[last:cut]
        assert tap.feed(piece) == piece  # nothing held back, nothing changed
        pieces.append(piece)
        last = cut
    assert tap.finish() == b"" and tap.usage is not None and tap.usage["prompt_tokens"] == 9


def test_events_before_the_finish_are_not_held() -> None:
    tap = StreamTap(strip_usage=True)
    assert tap.feed(_chunk("a", None)) == _chunk("a", None)
    assert tap.feed(_chunk("c", "stop")) == b""  # waits for the usage chunk's fingerprint
    assert tap.feed(USAGE) == _chunk("c", "stop", fp=True)


def test_a_stream_cut_off_before_its_usage_gives_what_it_had() -> None:
    tap = StreamTap(strip_usage=True)
    data = _chunk("a", None) + _chunk("c", "stop") + b'data: {"partial'
    assert tap.feed(data) == _chunk("a", None)
    assert tap.finish() == _chunk("c", "stop") + b'data: {"partial' and tap.usage is None
