"""Rotating capture files: sizes, ages, names, and lines that stay whole."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
from pathlib import Path

from autotune.capture.recorder import Recorder
from autotune.traffic.capture_format import CaptureRecord
from autotune.traffic.formats import load_trace


def _record(i: int) -> CaptureRecord:
    return CaptureRecord(ts=1767225600.0 + i, api="completion", prompt_tokens=100 + i,
                         output_tokens=7, hash_ids=(i, -i))


def test_rotation_by_size_keeps_every_line_whole(tmp_path: Path) -> None:
    line_bytes = len(_record(0).to_json_line())

    async def go() -> Recorder:
        rec = Recorder(tmp_path, rotate_bytes=3 * line_bytes + 5, flush_interval_s=60)
        await rec.start()
        for i in range(10):
            rec.add(_record(i))
            await rec.flush()  # one record a batch: rotation between any two
        await rec.close()
        return rec

    rec = asyncio.run(go())
    files = sorted(tmp_path.glob("capture-*.jsonl"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    assert files == rec.files and len(files) == 4  # 3 + 3 + 3 + 1
    assert all(re.fullmatch(r"capture-\d{8}T\d{6}-\d+\.jsonl", f.name) for f in files)
    assert all(f.stat().st_size <= 3 * line_bytes + 5 for f in files)
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    seen = [n for f in files for n in load_trace(f).prompt_tokens.tolist()]
    assert seen == list(range(100, 110))


def test_rotation_by_age(tmp_path: Path) -> None:
    now = [1767225600.0]

    async def go() -> None:
        rec = Recorder(tmp_path, rotate_s=60, flush_interval_s=60, clock=lambda: now[0])
        for i in range(4):
            rec.add(_record(i))
            await rec.flush()
            now[0] += 25  # files opened at 0 and 75 s (75 >= 60 triggers at the 4th)
        await rec.close()

    asyncio.run(go())
    files = sorted(tmp_path.glob("capture-*.jsonl"))
    assert [f.name for f in files] == ["capture-20260101T000000-1.jsonl",
                                       "capture-20260101T000115-2.jsonl"]
    assert [len(f.read_text().splitlines()) for f in files] == [3, 1]


def test_the_flusher_writes_without_being_asked_and_no_file_without_records(tmp_path: Path) -> None:
    async def go() -> list[str]:
        rec = Recorder(tmp_path, flush_interval_s=0.05)
        await rec.start()
        await asyncio.sleep(0.2)  # four flush intervals with nothing to write
        assert list(tmp_path.iterdir()) == []  # nothing to write, no empty file
        rec.add(_record(1))
        lines: list[str] = []
        for _ in range(200):  # a bounded poll (10 s): before close, the flusher wrote it
            if rec.files and (lines := rec.files[0].read_text().splitlines()):
                break
            await asyncio.sleep(0.05)
        await rec.close()
        return lines

    (line,) = asyncio.run(go())
    assert json.loads(line)["prompt_tokens"] == 101


def test_a_new_recorder_never_appends_to_an_existing_file(tmp_path: Path) -> None:
    async def once() -> Path:
        rec = Recorder(tmp_path, clock=lambda: 1767225600.0)
        rec.add(_record(0))
        await rec.close()
        return rec.files[0]

    first, second = asyncio.run(once()), asyncio.run(once())
    assert first != second and first.read_text() == second.read_text()
    assert sorted(os.listdir(tmp_path)) == ["capture-20260101T000000-1.jsonl",
                                            "capture-20260101T000000-2.jsonl"]


def test_close_waits_for_the_write_in_flight(tmp_path: Path) -> None:
    """A write still running in its thread when the proxy stops: the last flush comes after it,
    into the same file, in order (a cancelled flusher let the last flush overtake it)."""
    import threading
    import time

    async def go() -> Recorder:
        rec = Recorder(tmp_path, flush_interval_s=0.01)
        write, first = rec._write, threading.Event()

        def slow_first(lines: list[str]) -> None:
            if not first.is_set():
                first.set()
                time.sleep(0.5)
            write(lines)

        rec._write = slow_first  # type: ignore[method-assign]
        await rec.start()
        rec.add(_record(0))
        while not first.is_set():  # the flusher is inside its first write
            await asyncio.sleep(0.005)
        rec.add(_record(1))
        await rec.close()
        return rec

    rec = asyncio.run(go())
    files = sorted(tmp_path.glob("capture-*.jsonl"))
    assert len(files) == 1 and rec.records_written == 2
    lines = files[0].read_text().splitlines()
    assert [json.loads(line)["prompt_tokens"] for line in lines] == [100, 101]
