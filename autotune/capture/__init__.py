"""`autotune capture`: a recording reverse proxy in front of an OpenAI-compatible server.

    options.py       the flags, checked (ConfigError) before anything listens or writes
    request_info.py  what a request says (api, max_tokens, prompt) and the body sent upstream
    sse.py           a stream on its way back: usage read out, the proxy's own usage chunk taken out
    hashing.py       the salt and the chained, salted prefix-block hashes
    recorder.py      rotating JSONL files, flushed every half second (format: traffic.capture_format)
    proxy.py         the aiohttp server and client that tie them together
"""

from __future__ import annotations

from autotune.capture.options import CaptureOptions, build_options
from autotune.capture.proxy import CaptureProxy, run_capture

__all__ = ["CaptureOptions", "CaptureProxy", "build_options", "run_capture"]
