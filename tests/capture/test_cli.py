"""`autotune capture` as a process: bad flags, a SIGKILL mid-traffic, the salt across runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.traffic.formats import import_file
from tests.capture.fake_upstream import FakeUpstream
from tests.capture.helpers import serving
from tests.conftest import AUTOTUNE, ROOT, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """The fake upstream on a thread of its own, so a proxy process can reach it."""
    loop = asyncio.new_event_loop()
    started: list[str] = []
    stop = asyncio.Event()

    async def serve() -> None:
        async with serving(FakeUpstream().app()) as url:
            started.append(url)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    yield started[0]
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=10)


@pytest.mark.parametrize("args,message", [
    (["--rotate-mb", "1", "--rotate-s", "5"], "--rotate-mb and --rotate-s exclude each other"),
    (["--rotate-mb", "0"], "--rotate-mb must be positive"),
    (["--listen", "localhost"], "--listen 'localhost' is not HOST:PORT"),
    (["--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
    (["--upstream", "ftp://x"], "--upstream 'ftp://x' is not an http(s) URL"),
    (["--hash-block-tokens", "0"], "--hash-block-tokens must be from 1"),
    (["--salt-file", "/nonexistent/salt"], "--salt-file /nonexistent/salt does not exist"),
    (["--bogus"], "No such option"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--upstream": "http://127.0.0.1:1", "--out": str(tmp_path / "cap"),
            "--listen": "127.0.0.1:0"}
    for flag in ("--upstream", "--listen"):
        if flag in args:
            base.pop(flag)
    argv = [x for kv in base.items() for x in kv] + args
    result = run_cli("capture", *argv, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("autotune: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_an_unwritable_out_dir_and_a_taken_port(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = run_cli("capture", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
                     "--out", str(tmp_path / "file" / "sub"), timeout=60)
    assert result.returncode == 2 and "cannot create the directory" in result.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run_cli("capture", "--upstream", "http://127.0.0.1:1", "--listen",
                         f"127.0.0.1:{port}", "--out", str(tmp_path / "cap"), timeout=60)
    assert result.returncode == 2 and f"127.0.0.1:{port}: cannot listen" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _start(out: Path, upstream: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([AUTOTUNE, "capture", "--upstream", upstream, "--listen",
                             "127.0.0.1:0", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("capturing http://"), (line, proc.stderr.read() if proc.poll() else "")
    return proc, line.split()[1]


def _complete(url: str, i: int) -> dict[str, object]:
    body = json.dumps({"model": "m", "prompt": "x " * (i + 1), "max_tokens": 2}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_sigkill_loses_nothing_flushed_and_the_salt_is_kept(
        tmp_path: Path, upstream: str) -> None:
    out = tmp_path / "cap"
    proc, url = _start(out, upstream)
    try:
        for i in range(20):
            assert _complete(url, i)["usage"]["completion_tokens"] == 2  # type: ignore[index]
        # The recorder syncs at least once a second: wait (bounded) until all 20 are on disk.
        deadline = time.monotonic() + 10
        while sum(len(f.read_text().splitlines()) for f in out.glob("capture-*.jsonl")) < 20:
            assert time.monotonic() < deadline, "the capture was not flushed within 10 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    salt = out / "salt"
    assert stat.S_IMODE(salt.stat().st_mode) == 0o600 and len(salt.read_text().strip()) == 64
    (first,) = out.glob("capture-*.jsonl")
    imported = import_file(first)
    assert sorted(imported.trace.prompt_tokens.tolist()) == list(range(1, 21))
    secret = salt.read_text()

    proc, url = _start(out, upstream)  # a restart: same salt, a new file, clean stop on SIGTERM
    try:
        _complete(url, 0)
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "stopped: 1 requests recorded in 1 files" in stdout
    assert salt.read_text() == secret and len(list(out.glob("capture-*.jsonl"))) == 2
