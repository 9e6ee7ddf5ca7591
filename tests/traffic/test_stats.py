"""Trace statistics, checked on the real traces against values computed here independently."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import TraceError
from autotune.traffic.formats import load_trace
from autotune.traffic.stats import paths, prefix_share_ratio, trace_stats
from autotune.traffic.trace import Trace
from tests.conftest import public_trace, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


def test_mooncake_trace_against_its_raw_rows() -> None:
    path = public_trace("mooncake_synthetic.jsonl")
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stats = trace_stats(load_trace(path))
    assert stats["requests"] == len(raw) == 3993
    assert stats["duration_s"] == pytest.approx((raw[-1]["timestamp"] - raw[0]["timestamp"]) / 1000)
    for key, col in (("prompt_tokens", "input_length"), ("output_tokens", "output_length")):
        values = np.array([r[col] for r in raw])
        assert stats[key] == pytest.approx({f"p{q}": np.percentile(values, q) for q in (50, 90, 99)})
    # Leading blocks seen before, 512 tokens each, capped at the prompt: computed the slow way.
    seen: set[int] = set()
    shared = 0
    for r in raw:
        lead = next((k for k, h in enumerate(r["hash_ids"]) if h not in seen), len(r["hash_ids"]))
        shared += min(lead * 512, r["input_length"])
        seen |= set(r["hash_ids"])
    assert stats["prefix_share_ratio"] == pytest.approx(shared / sum(r["input_length"] for r in raw))
    assert 0.3 < stats["prefix_share_ratio"] < 0.9


def test_azure_code_trace_against_its_raw_rows() -> None:
    path = public_trace("azure_llm_2023_code.csv")
    with path.open() as f:
        raw = list(csv.DictReader(f))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in raw]
    stats = trace_stats(load_trace(path))
    assert stats["requests"] == 8819
    assert stats["duration_s"] == pytest.approx((max(stamps) - min(stamps)).total_seconds(), abs=1e-3)
    prompts = np.array([int(r["ContextTokens"]) for r in raw])
    assert stats["prompt_tokens"]["p50"] == np.percentile(prompts, 50)
    assert stats["prompt_tokens"]["p99"] == pytest.approx(np.percentile(prompts, 99))
    assert stats["prefix_share_ratio"] == 0  # the Azure traces carry no prefix hashes
    hot = np.mean([int(r["GeneratedTokens"]) <= 512 for r in raw])
    assert stats["path_mix"]["hot"] == pytest.approx(hot)


def test_paths_follow_the_tuning_guide() -> None:
    rows = [{"arrival_s": i, "prompt_tokens": 600, "output_tokens": out, "hash_ids": ids,
             "hash_block_tokens": 64}
            for i, (out, ids) in enumerate([(100, [1, 2]), (900, [1, 3]), (900, [1, 4]),
                                            (900, [7, 8]), (512, [])])]
    t = Trace.from_rows("t", rows)
    assert paths(t, warm_min_share=0.4) == ["hot", "warm", "warm", "cold", "hot"]
    assert prefix_share_ratio(t) == pytest.approx(2 * 64 / (5 * 600))  # block 1, twice


def test_mooncake_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                    '{"timestamp": 9, "input_length": -5, "output_length": 2}\n')
    with pytest.raises(TraceError, match="row 2, column 'input_length'"):
        load_trace(path)


def test_traffic_show_json(tmp_path: Path) -> None:
    proc = run_cli("traffic", "show", str(public_trace("mooncake_synthetic.jsonl")), "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert {"requests", "duration_s", "rate_rps", "prompt_tokens", "output_tokens",
            "prefix_share_ratio", "path_mix"} <= set(stats)
    bad = run_cli("traffic", "show", str(tmp_path / "missing.jsonl"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr
