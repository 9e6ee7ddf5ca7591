"""`traffic show --json/--plot` and `traffic split`, on the real Mooncake trace."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from autotune.traffic.parquet_store import read_parquet
from autotune.traffic.split import split_by_path
from autotune.traffic.stats import paths
from autotune.traffic.trace import Trace
from tests.conftest import public_trace, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


def test_show_json_against_raw_rows_and_plot(tmp_path: Path) -> None:
    src = public_trace("mooncake_synthetic.jsonl")
    raw = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    png = tmp_path / "trace.png"
    proc = run_cli("traffic", "show", str(src), "--json", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    times = np.array([r["timestamp"] for r in raw]) / 1000
    gaps = np.diff(times)
    assert stats["requests"] == 3993
    assert stats["duration_s"] == pytest.approx(times[-1] - times[0])
    assert stats["rate_rps"] == pytest.approx(3993 / (times[-1] - times[0]))
    assert stats["burstiness_cv"] == pytest.approx(gaps.std() / gaps.mean())
    outputs = np.array([r["output_length"] for r in raw])
    assert stats["output_tokens"]["p90"] == pytest.approx(np.percentile(outputs, 90))
    assert stats["path_mix"]["hot"] == pytest.approx(np.mean(outputs <= 512))
    assert sum(stats["path_mix"].values()) == pytest.approx(1)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_show_refuses_a_bad_trace_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"arrival_s": 1\n')
    proc = run_cli("traffic", "show", str(bad), "--plot", str(tmp_path / "p.png"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "row 2, column '*'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "p.png").exists()


def _mixed() -> Trace:
    rows: list[dict[str, object]] = []
    for i in range(60):
        shared = i % 3 != 0
        rows.append({"arrival_s": i, "prompt_tokens": 300, "output_tokens": 100 + 20 * i,
                     "max_tokens": 2000 if i % 5 == 0 else None,
                     "hash_ids": [7, 1000 + i] if shared else [5000 + i], "hash_block_tokens": 64})
    return Trace.from_rows("mixed", rows)


def test_split_writes_one_sub_trace_per_path(tmp_path: Path) -> None:
    t = _mixed()
    labels = paths(t, hot_max_tokens=600, warm_min_share=0.2)
    counts = Counter(labels)
    assert set(counts) == {"hot", "warm", "cold"}  # the fixture exercises every path
    # max_tokens decides where known: request 0 has 100 output tokens but asked for 2000.
    assert labels[0] != "hot" and labels[1] == "hot"
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in t.to_rows()))
    proc = run_cli("traffic", "split", str(src), "--out", str(tmp_path / "paths"),
                   "--hot-max-tokens", "600", "--warm-min-share", "0.2")
    assert proc.returncode == 0, proc.stderr
    for name, n in counts.items():
        part = read_parquet(tmp_path / "paths" / f"{name}.parquet")
        assert len(part) == n and part.arrival_s[0] == 0
        want = [i for i, label in enumerate(labels) if label == name]
        assert part.output_tokens.tolist() == [int(t.output_tokens[i]) for i in want]
    parts = split_by_path(t, hot_max_tokens=10_000)
    assert list(parts) == ["hot"] and len(parts["hot"]) == 60
