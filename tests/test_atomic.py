"""Atomic writes: whole or absent, and readable as a plain write would leave them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from autotune.atomic import atomic_write, atomic_write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_is_readable_by_all(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    atomic_write_text(path, "a: 1\n")
    assert path.read_text() == "a: 1\n" and _mode(path) == 0o644  # not mkstemp's 0600


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and _mode(path) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "trace.parquet"
    path.write_text("whole\n")

    def fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_text() == "whole\n" and [p.name for p in tmp_path.iterdir()] == [path.name]
