"""Writing outputs so that each is either complete or absent: a temporary file (or folder)
beside the target, synced, then renamed over it. A failure or a crash never leaves a partial
trace, profile, measurement file or report where a reader would take it for a whole one."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary path in the target's directory, then rename it to path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        # mkstemp makes the file 0600; a replaced file keeps its mode, a new one is readable by
        # all, as a plain open() would leave it (profiles, traces and configs are shared).
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write)


def atomic_directory(out_dir: Path, fill: Callable[[Path], None]) -> None:
    """Call fill(tmp) on a temporary folder beside out_dir, then put it in out_dir's place
    (replacing an earlier one, which stays whole until the new one is in place)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; outputs are meant to be served and shared
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.",
                                        suffix=".old"))
            os.replace(out_dir, old)
            try:
                os.replace(tmp, out_dir)
            except BaseException:
                os.replace(old, out_dir)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
