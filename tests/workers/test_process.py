"""Engine process lifecycle with small stand-in server processes (fast); the same code against
real vLLM engines is in tests/workers/vllm/test_engine.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.errors import EngineStartError
from autotune.workers.vllm.process import EngineProcess, classify_start_failure, free_port, port_is_free

SERVER = textwrap.dedent('''
    import http.server, os, subprocess, sys
    port = int(sys.argv[1])
    # A child in the same process group, as vLLM's engine core is.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("child", child.pid, flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
''')


def _pids_in_log(path: Path) -> list[int]:
    return [int(line.split()[1]) for line in path.read_text().splitlines() if line.startswith("child")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_start_health_and_stop_take_the_whole_group(tmp_path: Path) -> None:
    port = free_port()
    engine = EngineProcess([sys.executable, "-c", SERVER, str(port)], port=port,
                           log_path=tmp_path / "e.log")
    assert engine.start(timeout_s=30) < 30
    assert engine.alive() and not port_is_free(port)
    deadline = time.monotonic() + 10
    while not (children := _pids_in_log(tmp_path / "e.log")):
        assert time.monotonic() < deadline, "the server logged no children"
        time.sleep(0.05)
    assert all(_alive(p) for p in children)
    engine.stop(grace_s=5)
    assert port_is_free(port)
    assert not any(_alive(p) for p in children)
    engine.stop()  # twice is fine


def test_engine_has_its_own_group_in_the_tuners_session(tmp_path: Path) -> None:
    """Its own process group (so stop() reaches all of it), but not its own session: with
    autogroup scheduling a session is a scheduling group, and the replay client in the tuner's
    session then stalled for hundreds of milliseconds while the engine was busy."""
    port = free_port()
    engine = EngineProcess([sys.executable, "-c", SERVER, str(port)], port=port,
                           log_path=tmp_path / "e.log")
    engine.start(timeout_s=30)
    try:
        assert engine.proc is not None
        pid = engine.proc.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
        assert os.getsid(pid) == os.getsid(0)
    finally:
        engine.stop(grace_s=5)


def test_exit_during_start_is_classified(tmp_path: Path) -> None:
    script = "import sys; print('api_server.py: error: unrecognized arguments: --bogus'); sys.exit(2)"
    engine = EngineProcess([sys.executable, "-c", script], port=free_port(),
                           log_path=tmp_path / "e.log")
    with pytest.raises(EngineStartError) as info:
        engine.start(timeout_s=30)
    assert info.value.failure_class == "invalid_args"
    assert "unrecognized arguments: --bogus" in str(info.value) and "e.log" in str(info.value)


def test_never_healthy_is_a_start_timeout_and_leaves_nothing(tmp_path: Path) -> None:
    engine = EngineProcess([sys.executable, "-c", "import time; print('loading', flush=True); "
                            "time.sleep(600)"], port=free_port(), log_path=tmp_path / "e.log")
    with pytest.raises(EngineStartError) as info:  # the child sleeps 600 s: a start that
        engine.start(timeout_s=2)  # waited for it would see an exit, not a timeout
    assert info.value.failure_class == "start_timeout"
    assert engine.proc is None


def test_engine_dies_with_a_killed_tuner(tmp_path: Path) -> None:
    """SIGKILL the process that started the engine: the engine must not outlive it."""
    port = free_port()
    tuner = textwrap.dedent(f'''
        import sys, time
        from pathlib import Path
        from autotune.workers.vllm.process import EngineProcess
        e = EngineProcess([sys.executable, "-c", {SERVER!r}, "{port}"], port={port},
                          log_path=Path({str(tmp_path / "e.log")!r}))
        e.start(timeout_s=30)
        print("engine", e.proc.pid, flush=True)
        time.sleep(600)
    ''')
    proc = subprocess.Popen([sys.executable, "-c", tuner], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("engine"), line
    engine_pid = int(line.split()[1])
    assert _alive(engine_pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(engine_pid)
    # And so must its child, which does not watch its parent (vLLM's engine core and worker
    # outlived a killed API server by 15 minutes): the group's guard takes it.
    children = _pids_in_log(tmp_path / "e.log")
    assert children
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert not [pid for pid in children if _alive(pid)]
    finally:
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("code, log, expected", [
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "oom"),
    (1, "ValueError: To serve at least one request with the model's max seq len (65536), (2.0 GiB "
        "KV cache is needed, which is larger than the available KV cache memory (1.0 GiB).", "oom"),
    (1, "ValueError: No available memory for the cache blocks. Try increasing", "oom"),
    (1, "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).", "invalid_args"),
    (2, "api_server.py: error: argument --max-num-seqs: invalid int value: 'abc'", "invalid_args"),
    (1, "ValueError: max_num_batched_tokens (8) must be greater than or equal to max_num_seqs",
     "invalid_args"),
    (2, "usage: api_server.py ...", "invalid_args"),
    (-9, "", "oom"),
    (1, "RuntimeError: something else", "start_failed"),
])
def test_classification(code: int, log: str, expected: str) -> None:
    assert classify_start_failure(code, log) == expected
