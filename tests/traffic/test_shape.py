"""Shaping: window, stratified sample, length cap, rate scale; deterministic for a seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.errors import ConfigError
from autotune.traffic.formats import load_trace
from autotune.traffic.parquet_store import read_parquet
from autotune.traffic.shape import DAY_S, ShapeSpec, shape, time_offset_s
from autotune.traffic.trace import Trace
from tests.conftest import public_trace, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


def _ramp(n: int = 2000) -> Trace:
    """Arrivals whose rate doubles half-way: 1/s for 1000 s, then 2/s for 500 s."""
    t = np.concatenate([np.arange(1000.0), 1000 + np.arange(1000) / 2.0])[:n]
    return Trace.from_columns("ramp", arrival_s=t, prompt_tokens=np.full(n, 100),
                              output_tokens=np.full(n, 10))


def test_window_by_start_end_and_last_days() -> None:
    t = _ramp()
    w = shape(t, ShapeSpec(start_s=100, end_s=200))
    assert len(w) == 100 and w.arrival_s[0] == 0 and w.arrival_s[-1] == 99
    days = Trace.from_columns("d", arrival_s=np.arange(10) * DAY_S, prompt_tokens=[5] * 10,
                              output_tokens=[5] * 10, start_epoch_s=1_700_000_000.0)
    last = shape(days, ShapeSpec(last_days=3))
    assert len(last) == 4 and last.start_epoch_s == 1_700_000_000.0 + 6 * DAY_S
    with pytest.raises(ConfigError, match="holds no requests"):
        shape(t, ShapeSpec(start_s=5000))
    with pytest.raises(ConfigError, match="not both"):
        shape(t, ShapeSpec(start_s=1, last_days=1))


def test_iso_bounds_need_wall_clock_times() -> None:
    days = Trace.from_columns("d", arrival_s=[0, 60], prompt_tokens=[5, 5], output_tokens=[5, 5],
                              start_epoch_s=1_767_225_600.0)  # 2026-01-01T00:00:00Z
    assert time_offset_s("2026-01-01T00:01:00Z", days) == 60
    assert time_offset_s("12.5", days) == 12.5
    with pytest.raises(ConfigError, match="no wall-clock times"):
        time_offset_s("2026-01-01T00:01:00Z", _ramp())


def test_sample_keeps_the_rate_profile_and_is_deterministic() -> None:
    t = _ramp()
    t = t.evolve(prompt_tokens=np.arange(1, len(t) + 1))  # prompt length = original index + 1
    a = shape(t, ShapeSpec(sample_requests=300, seed=1))
    b = shape(t, ShapeSpec(sample_requests=300, seed=1))
    c = shape(t, ShapeSpec(sample_requests=300, seed=2))
    assert len(a) == 300 and a.to_rows() == b.to_rows() and a.to_rows() != c.to_rows()
    original = t.arrival_s[a.prompt_tokens - 1]
    assert len(set(a.prompt_tokens.tolist())) == 300  # no request twice
    # Per 100 s bin, the sample keeps 15% of the requests: the rate doubles where it did.
    edges = np.arange(0, 1600, 100)
    kept, _ = np.histogram(original, edges)
    full, _ = np.histogram(t.arrival_s, edges)
    assert np.abs(kept - 0.15 * full).max() <= 1
    assert int((original >= 1000).sum()) == 150


def test_rate_scale_and_length_cap() -> None:
    t = Trace.from_rows("t", [
        {"arrival_s": 0, "prompt_tokens": 3000, "output_tokens": 100, "hash_ids": [1, 2, 3],
         "hash_block_tokens": 1024, "max_tokens": 500, "prompt": "long text"},
        {"arrival_s": 4, "prompt_tokens": 10, "output_tokens": 5000, "prompt": "short"},
        {"arrival_s": 8, "prompt_tokens": 50, "output_tokens": 20},
    ])
    s = shape(t, ShapeSpec(max_model_len=2048, rate_scale=2))
    assert s.arrival_s.tolist() == [0, 2, 4]
    assert s.output_tokens.tolist() == [100, 2047, 20]  # outputs keep their length up to L - 1
    assert s.prompt_tokens.tolist() == [1948, 1, 50]
    assert (s.prompt_tokens + s.output_tokens <= 2048).all()
    assert s.hash_ids[0] == (1, 2)  # 1948 tokens: two 1024-token blocks
    assert s.max_tokens == (100, None, None)
    assert s.texts == ()  # both prompts were cut: their text no longer fits, none is left


def test_shape_command_on_the_azure_trace(tmp_path: Path) -> None:
    src = public_trace("azure_llm_2023_code.csv")
    out = tmp_path / "shaped.parquet"
    args = ["traffic", "shape", str(src), "--out", str(out), "--start", "600", "--end", "1800",
            "--sample", "400", "--rate-scale", "3", "--max-model-len", "4096", "--seed", "7"]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    full = load_trace(src)
    in_window = int(((full.arrival_s >= 600) & (full.arrival_s < 1800)).sum())
    shaped = read_parquet(out)
    assert len(shaped) == 400 < in_window
    assert shaped.duration_s < 1200 / 3
    assert int((shaped.prompt_tokens + shaped.output_tokens).max()) <= 4096
    again = tmp_path / "again.parquet"
    assert run_cli(*args[:4], str(again), *args[5:]).returncode == 0
    assert read_parquet(again).content_digest() == shaped.content_digest()
    bad = run_cli("traffic", "shape", str(src), "--out", str(tmp_path / "x.parquet"), "--rate-scale", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--rate-scale" in bad.stderr
    assert not (tmp_path / "x.parquet").exists()
