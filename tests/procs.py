"""Finding the processes a test started, by a mark in their environment.

Ray's raylet, GCS and workers inherit the driver's environment, so a mark given to an
`autotune tune` process finds everything it spawned, and nothing another engineer runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

MARK = "AUTOTUNE_TEST_MARK"
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))


def marked(mark: str) -> dict[int, str]:
    """pid -> command line of the live processes carrying this mark."""
    found = {}
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if state != "Z":
            found[int(entry.name)] = cmd
    return found


def wait_gone(mark: str, timeout_s: float = 30) -> dict[int, str]:
    """Wait for every marked process to end; returns those still there."""
    deadline = time.monotonic() + timeout_s
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(name="mark")
def mark_fixture() -> Iterator[str]:
    """A mark for this test's processes; the test fails if any outlives it."""
    value = uuid.uuid4().hex
    yield value
    left = wait_gone(value)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"


def start_tune(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`autotune ARGS` in the background, its output to files (a pipe left unread would block
    it): LOG.out and LOG.err."""
    with log.with_suffix(".out").open("wb") as out, log.with_suffix(".err").open("wb") as err:
        return subprocess.Popen([AUTOTUNE, *args], env={**os.environ, **env}, stdout=out,
                                stderr=err)
