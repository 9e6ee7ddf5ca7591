"""One vLLM server process: start it in its own process group, wait until /health answers,
classify a failed start from its exit code and log, and stop it so that nothing outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from autotune.errors import EngineStartError
from autotune.vocabulary import FailureClass

# Failure signatures in a server log, checked in order; the first match names the class.
_SIGNATURES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    # Signatures seen from vLLM 0.32 (CPU build) and CUDA builds.
    (FailureClass.OOM, re.compile(
        r"out of memory|OutOfMemoryError|No available memory for the cache blocks"
        r"|larger than the available KV cache memory"
        r"|larger than the maximum number of tokens that can be stored in KV cache"
        r"|less than requested memory for kv|Insufficient memory", re.I)),
    (FailureClass.INVALID_ARGS, re.compile(
        r"error: unrecognized arguments|error: argument |invalid choice"
        r"|ValidationError|ValueError|must be (?:greater|less|at least|a multiple)"
        r"|should be (?:greater|less|a multiple)", re.I)),
)
_PR_SET_PDEATHSIG = 1
# Run in the engine's process group: when the tuner that started it is gone (its parent changed),
# it kills the group. PDEATHSIG reaches only the API server, and vLLM's engine core and worker
# outlived a killed one (a killed fidelity benchmark left both busy for 15 minutes).
_GUARD = """
import os, signal, sys, time
tuner = int(sys.argv[1])
while os.getppid() == tuner:
    time.sleep(0.5)
os.killpg(os.getpgid(0), signal.SIGKILL)
"""


def classify_start_failure(exit_code: int | None, log_text: str) -> FailureClass:
    """oom, invalid_args or start_failed, from how the server died and what it logged."""
    for failure_class, pattern in _SIGNATURES:
        if pattern.search(log_text):
            return failure_class
    if exit_code == 2:  # argparse's exit code
        return FailureClass.INVALID_ARGS
    if exit_code is not None and exit_code < 0 and -exit_code == signal.SIGKILL:
        return FailureClass.OOM  # the kernel's OOM killer
    return FailureClass.START_FAILED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Nothing listens on it (connections left in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    """In the child before exec: its own process group, and SIGKILL when the tuner dies (Linux).

    A process group, not a session (setsid): with the kernel's autogroup scheduling (on by
    default in many distributions' kernels) every session is its own scheduling group, and
    CFS shares CPU time between the groups first. With the engine in a session of its own,
    every process in the tuner's session, the replay client included, stalls while the engine
    is busy (docs/benchmarks/replay-client.md)."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _log_tail(path: Path, limit: int = 20_000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


_CAUSE = re.compile(r"Value error, |\b\w*(?:Error|Exception): |\berror: |out of memory", re.I)
_NOISE = re.compile(r"errors\.pydantic\.dev|See root cause above|Traceback")


def _last_error_line(text: str) -> str:
    """The line that says why: the last root-cause-looking line, without the wrappers."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    causes = [x for x in lines if _CAUSE.search(x) and not _NOISE.search(x)]
    # vLLM re-raises a root cause as "RuntimeError: Engine core initialization failed"; the
    # ValueError (or pydantic's "Value error,") before it says what was wrong.
    specific = [x for x in causes if not x.startswith("RuntimeError: Engine core")]
    chosen = (specific or causes or lines or ["no output"])[-1]
    return chosen[:300]


class EngineProcess:
    """A server process and its whole process group."""

    def __init__(self, command: list[str], *, port: int, log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.command, self.port, self.log_path = command, port, log_path
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float) -> float:
        """Start and wait for /health; returns seconds to healthy. EngineStartError otherwise."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         preexec_fn=_die_with_parent)
        pgid = self.proc.pid
        self._guard = subprocess.Popen([sys.executable, "-c", _GUARD, str(os.getpid())],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL,
                                       preexec_fn=lambda: os.setpgid(0, pgid))
        while True:
            code = self.proc.poll()
            if code is not None:
                text = _log_tail(self.log_path)
                failure = classify_start_failure(code, text)
                self.stop()
                raise EngineStartError(f"engine exited with code {code} during start-up: "
                                       f"{_last_error_line(text)} (log: {self.log_path})", failure)
            if self._healthy():
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                self.stop()
                raise EngineStartError(f"engine not healthy after {timeout_s:.0f} s "
                                       f"(log: {self.log_path})", FailureClass.START_TIMEOUT)
            time.sleep(0.5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the group, SIGKILL after the grace period; then wait for the port."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # setpgid made the child its own group leader
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and _group_alive(pgid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.2)
            if not _group_alive(pgid):
                break
        for proc in (self.proc, self._guard):
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        deadline = time.monotonic() + 10
        while not port_is_free(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.proc = self._guard = None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of our own child count as gone.
    return bool(group_pids(pgid))


def group_pids(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids
