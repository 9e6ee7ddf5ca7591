"""The capture log on disk: rotating append-only JSONL files, flushed at least every second.

Records queue in memory and a flusher writes them every `flush_interval_s`, each batch in one
`os.write` followed by `fsync` (in a thread, so the event loop never waits on the disk). A crash
therefore loses at most the last interval's records, and can at worst leave a partial last line,
which the importer skips; lines before it are never touched. A process never appends to a file
it did not create: each file is opened with O_EXCL, so a restart starts a new file.

Files are `capture-YYYYmmddTHHMMSS-N.jsonl` (UTC time the file was opened, N counting files of
this process from 1), rotated by size or by age, created only when there is a record to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from autotune.traffic.capture_format import CaptureRecord

log = logging.getLogger("autotune.capture")
FILE_GLOB = "capture-*.jsonl"


class Recorder:
    def __init__(self, out_dir: Path, *, rotate_bytes: int | None = None,
                 rotate_s: float | None = None, flush_interval_s: float = 0.5,
                 clock: Callable[[], float] = time.time) -> None:
        self.out_dir = out_dir
        self.rotate_bytes, self.rotate_s = rotate_bytes, rotate_s
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._pending: list[str] = []
        self._fd: int | None = None
        self._file_bytes = 0
        self._opened_at_s = 0.0
        self._sequence = 0
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one batch at a time, in order
        self._stopping = asyncio.Event()
        self.files: list[Path] = []
        self.records_written = 0

    def add(self, record: CaptureRecord) -> None:
        self._pending.append(record.to_json_line())

    async def start(self) -> None:
        self._task = asyncio.create_task(self._flush_loop())

    async def close(self) -> None:
        # Not cancelled: a cancelled flush leaves its write running in the thread, and the
        # final flush below then ran beside it (a capture test on a loaded 2-core host found
        # two files; test_close_waits_for_the_write_in_flight). The loop ends its flush first.
        self._stopping.set()
        if self._task is not None:
            await self._task
        await self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def flush(self) -> None:
        async with self._lock:
            lines, self._pending = self._pending, []
            if lines:
                await asyncio.to_thread(self._write, lines)

    async def _flush_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.flush_interval_s)
            try:
                await self.flush()
            except OSError as exc:  # a full disk must not take the proxy down; traffic flows on
                log.error("capture: could not write records (%s); they are lost", exc)

    # -- in the writer thread ------------------------------------------------------------------
    def _write(self, lines: list[str]) -> None:
        data = "".join(lines).encode()
        if self._fd is None or self._should_rotate(len(data)):
            self._open_next()
        assert self._fd is not None
        view = memoryview(data)
        while view:  # os.write may write less than asked (a signal, a full pipe); finish it
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)
        self._file_bytes += len(data)
        self.records_written += len(lines)

    def _should_rotate(self, incoming_bytes: int) -> bool:
        if self._file_bytes == 0:
            return False
        if self.rotate_bytes is not None and self._file_bytes + incoming_bytes > self.rotate_bytes:
            return True
        return self.rotate_s is not None and self._clock() - self._opened_at_s >= self.rotate_s

    def _open_next(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        now = self._clock()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
        while True:
            self._sequence += 1
            path = self.out_dir / f"capture-{stamp}-{self._sequence}.jsonl"
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
                break
            except FileExistsError:  # another process (or an earlier run) in the same second
                continue
        self._file_bytes, self._opened_at_s = 0, now
        self.files.append(path)
        log.info("capture: writing %s", path)
