"""The record format of the capture proxy's JSONL log, defined once for the proxy (which writes
it) and the importer (which reads it).

One JSON object a line, written when a response has finished (so lines are only nearly sorted by
arrival; the importer sorts them):

    {"v": 1, "ts": 1767225600.125, "api": "chat", "prompt_tokens": 812, "output_tokens": 96,
     "max_tokens": 256, "hash_ids": [48211, 99120], "hash_block_tokens": 512,
     "session_id": "s-17", "tenant": "search", "priority": 0, "text": "..."}

- `v`: the format version (`CAPTURE_FORMAT_VERSION`); absent means 1.
- `ts`: epoch seconds at which the proxy received the request.
- `api`: ``chat`` (/v1/chat/completions) or ``completion`` (/v1/completions).
- `prompt_tokens`, `output_tokens`: from the upstream's usage.
- `max_tokens`: what the client asked for, or null.
- `hash_ids`: salted hashes of the prompt's leading blocks of `hash_block_tokens` tokens each.
- `session_id`, `tenant`, `priority`: optional tags; `text`: the prompt, only with --store-text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

CAPTURE_FORMAT_VERSION = 1
REQUIRED_KEYS = ("ts", "api", "prompt_tokens", "output_tokens")
# record key -> the trace column it fills
COLUMNS = {"ts": "arrival_s", "api": "api", "prompt_tokens": "prompt_tokens",
           "output_tokens": "output_tokens", "max_tokens": "max_tokens", "hash_ids": "hash_ids",
           "hash_block_tokens": "hash_block_tokens", "session_id": "session_id",
           "tenant": "tenant", "priority": "priority", "text": "prompt"}


@dataclass(frozen=True)
class CaptureRecord:
    ts: float
    api: Literal["chat", "completion"]
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    hash_ids: tuple[int, ...] = ()
    hash_block_tokens: int = 512
    session_id: str | None = None
    tenant: str | None = None
    priority: int | None = None
    text: str | None = None

    def to_json_line(self) -> str:
        """One line of the log, newline included; absent optional fields are left out."""
        record: dict[str, object] = {"v": CAPTURE_FORMAT_VERSION}
        for key, value in asdict(self).items():
            if value is not None:
                record[key] = list(value) if isinstance(value, tuple) else value
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"


def is_capture_record(obj: Mapping[str, object]) -> bool:
    """Whether a JSON object looks like a capture record (used to recognise the format)."""
    return all(k in obj for k in REQUIRED_KEYS)


def trace_values(obj: Mapping[str, object]) -> dict[str, object]:
    """A record's values under the trace's column names (unchecked; the trace builder checks)."""
    return {column: obj.get(key) for key, column in COLUMNS.items()}
