"""The capture proxy's options, checked before anything listens or writes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from yarl import URL

from autotune.errors import SettingError

DEFAULT_ROTATE_MB = 100.0


@dataclass(frozen=True)
class CaptureOptions:
    upstream: str  # base URL of the upstream server, without a trailing slash
    host: str
    port: int
    out_dir: Path
    store_text: bool = False
    salt_file: Path | None = None
    hash_block_tokens: int = 512
    rotate_bytes: int | None = int(DEFAULT_ROTATE_MB * 1024 * 1024)
    rotate_s: float | None = None
    flush_interval_s: float = 0.5  # "at most the last second" with margin for a slow disk
    tokenize_timeout_s: float = 5.0
    max_request_bytes: int = 256 * 1024 * 1024  # long prompts and inline images are large


def parse_listen(listen: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (all interfaces); port 0 picks a free one."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingError("{listen} {got!r} is not HOST:PORT (e.g. 127.0.0.1:8001)", got=listen)
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def check_upstream(upstream: str) -> str:
    try:
        url = URL(upstream)
    except (ValueError, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise SettingError("{upstream} {got!r} is not an http(s) URL "
                           "(e.g. http://127.0.0.1:8000, the vLLM server)", got=upstream)
    if url.query_string or url.fragment:
        raise SettingError("{upstream} {got!r}: give the server's base URL, without a query or "
                           "fragment", got=upstream)
    return str(url).rstrip("/")


def check_out_dir(out_dir: Path) -> Path:
    """Create the directory if needed and make sure this process can write files into it."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingError("{out_dir} {path}: cannot create the directory ({why})", path=out_dir,
                           why=exc.strerror) from None
    if not out_dir.is_dir() or not os.access(out_dir, os.W_OK | os.X_OK):
        raise SettingError("{out_dir} {path} is not a writable directory; choose another",
                           path=out_dir)
    return out_dir


def build_options(*, upstream: str, listen: str, out_dir: Path, store_text: bool = False,
                  salt_file: Path | None = None, hash_block_tokens: int = 512,
                  rotate_mb: float | None = None, rotate_s: float | None = None) -> CaptureOptions:
    if rotate_mb is not None and rotate_s is not None:
        raise SettingError("{rotate_mb} and {rotate_s} exclude each other; give one")
    if rotate_mb is not None and not rotate_mb > 0:
        raise SettingError("{rotate_mb} must be positive, got {got}", got=rotate_mb)
    if rotate_s is not None and not rotate_s > 0:
        raise SettingError("{rotate_s} must be positive, got {got}", got=rotate_s)
    if not 1 <= hash_block_tokens <= 1 << 20:
        raise SettingError("{hash_block_tokens} must be from 1 to {most}, got {got}",
                           most=1 << 20, got=hash_block_tokens)
    if salt_file is not None and not salt_file.is_file():
        raise SettingError("{salt_file} {path} does not exist; leave it out to generate a salt "
                           "in the {out_dir} directory", path=salt_file)
    host, port = parse_listen(listen)
    rotate_bytes = (int(rotate_mb * 1024 * 1024) if rotate_mb is not None
                    else None if rotate_s is not None else int(DEFAULT_ROTATE_MB * 1024 * 1024))
    return CaptureOptions(upstream=check_upstream(upstream), host=host, port=port,
                          out_dir=check_out_dir(out_dir), store_text=store_text,
                          salt_file=salt_file, hash_block_tokens=hash_block_tokens,
                          rotate_bytes=rotate_bytes, rotate_s=rotate_s)
