"""`autotune capture`: record production traffic through a reverse proxy (autotune.capture)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from autotune.errors import ConfigError


def capture(
    upstream: Annotated[str, typer.Option(help="The server to proxy, e.g. http://127.0.0.1:8000.")],
    out: Annotated[Path, typer.Option(help="Directory for the capture files (and the salt).")],
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on (port 0: any free one).")]
        = "127.0.0.1:8001",
    store_text: Annotated[bool, typer.Option(
        "--store-text", help="Also record the prompt text (off by default: privacy).")] = False,
    salt_file: Annotated[Path | None, typer.Option(
        help="File holding the hash salt (default: OUT/salt, generated with mode 0600).")] = None,
    hash_block_tokens: Annotated[int, typer.Option(help="Tokens per prefix hash block.")] = 512,
    rotate_mb: Annotated[float | None, typer.Option(
        help="Start a new file after this many MiB (default 100).")] = None,
    rotate_s: Annotated[float | None, typer.Option(
        help="Start a new file after this many seconds (instead of --rotate-mb).")] = None,
) -> None:
    """Proxy an OpenAI-compatible server and record each completion's arrival, token counts,
    max_tokens, api and salted prefix hashes (import with `autotune traffic import`)."""
    from autotune.capture import build_options, run_capture
    from autotune.capture.proxy import CaptureProxy
    from autotune.settings import get_settings

    options = build_options(upstream=upstream, listen=listen, out_dir=out, store_text=store_text,
                            salt_file=salt_file, hash_block_tokens=hash_block_tokens,
                            rotate_mb=rotate_mb, rotate_s=rotate_s)
    try:
        level = get_settings().log_level
    except Exception as exc:  # pydantic's ValidationError: a bad AUTOTUNE_ variable
        raise ConfigError(f"bad AUTOTUNE_ setting: {str(exc).splitlines()[-1].strip()}") from None
    logging.basicConfig(level=getattr(logging, level.upper(), logging.WARNING),
                        stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def ready(url: str, proxy: CaptureProxy) -> None:
        # One line on stdout that scripts (and the tests) can wait for.
        print(f"capturing {url} -> {options.upstream} into {options.out_dir} "
              f"(salt {proxy.salt_path}{', with prompt text' if store_text else ''})", flush=True)

    proxy = asyncio.run(run_capture(options, ready))
    c = proxy.counts
    print(f"stopped: {c['recorded']} requests recorded in {len(proxy.recorder.files)} files, "
          f"{c['not_recorded']} not recorded, {c['upstream_unreachable']} upstream unreachable, "
          f"{c['tokenize_failed']} without hashes (tokenize failed)", flush=True)
