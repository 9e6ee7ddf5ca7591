"""A real `autotune api` process: started by the CLI on a free port, read over HTTP, refused
writes change nothing, and it is gone afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune.workers.vllm.process import free_port
from tests.api.seed import Seeded, seed_database
from tests.conftest import AUTOTUNE

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Server:
    base_url: str
    seeded: Seeded
    proc: subprocess.Popen[bytes]
    log: Path


def _request(url: str, method: str = "GET", body: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _wait_ready(base_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"`autotune api` exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if _request(f"{base_url}/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"`autotune api` not ready after {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    seeded = seed_database(f"sqlite:///{tmp_path / 'a.db'}")
    port = free_port()
    log = tmp_path / "api.log"
    env = {**os.environ, "AUTOTUNE_DATABASE_URL": seeded.url, "AUTOTUNE_API__TOKEN": "s3cret",
           "AUTOTUNE_LOG_LEVEL": "INFO"}
    with log.open("wb") as out:
        proc = subprocess.Popen([AUTOTUNE, "api", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_ready(base_url, proc, log)
        yield Server(base_url, seeded, proc, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        assert proc.returncode is not None


def test_real_server_reads_and_refuses_unauthorised_writes(server: Server) -> None:
    base = f"{server.base_url}/v1/deployments/{server.seeded.deployment}"
    status, config = _request(f"{base}/config")
    assert status == 200 and config["trial"] == server.seeded.published_trial
    assert config["cli_args"] and config["period"] == "2026Q4"
    _, before = _request(f"{base}/history")

    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, body = _request(f"{base}/publish", "POST", {"campaign": "2026Q4", "trial": 0},
                                headers)
        assert status == 401 and body["error"]["type"] == "Unauthorized"
        status, _ = _request(f"{base}/rollback", "POST", None, headers)
        assert status == 401
    assert _request(f"{base}/history") == (200, before)
    assert _request(f"{base}/config")[1]["trial"] == server.seeded.published_trial

    # The same token works, so the refusals above were about the token, not the route.
    status, published = _request(f"{base}/publish", "POST", {"campaign": "2026Q4", "trial": 0},
                                 {"Authorization": "Bearer s3cret"})
    assert status == 200 and published["trial"] == 0


def test_server_stops_gracefully_on_sigterm(server: Server) -> None:
    server.proc.terminate()
    # uvicorn shuts down cleanly, then re-raises the signal it caught: -SIGTERM, as schedulers
    # expect of a terminated process.
    assert server.proc.wait(timeout=15) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in server.log.read_text()
    with pytest.raises(OSError):
        _request(f"{server.base_url}/healthz")
