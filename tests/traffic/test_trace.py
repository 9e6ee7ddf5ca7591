from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.errors import TraceError
from autotune.traffic.formats import load_trace
from autotune.traffic.synthetic import chat_trace_rows, write_jsonl
from autotune.traffic.trace import DEMO_TRACE, file_digest
from tests.conftest import public_trace


def test_bundled_demo_trace_is_what_the_generator_makes(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    write_jsonl(chat_trace_rows(), path)
    assert file_digest(path) == file_digest(DEMO_TRACE)


def test_demo_trace_is_chat_like_with_shared_prefixes() -> None:
    t = load_trace(DEMO_TRACE)
    assert len(t) == 600 and 100 < t.duration_s < 200
    shared = sum(1 for ids in t.hash_ids if ids and ids[0] < 32)
    assert 0.6 < shared / len(t) < 0.8
    assert t.arrival_s[0] == 0 and (t.arrival_s[1:] >= t.arrival_s[:-1]).all()


def test_different_seeds_differ(tmp_path: Path) -> None:
    assert chat_trace_rows(seed=1) != chat_trace_rows(seed=2)


@pytest.mark.parametrize("line, fragment", [
    ("not json", "row 1, column '*': not a JSON object"),
    ('{"arrival_s": 0, "prompt_tokens": "x", "output_tokens": 1}', "column 'prompt_tokens'"),
    ('{"arrival_s": 0, "prompt_tokens": 5}', "column 'output_tokens'"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 0}', "at least 1"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "hash_ids": "ab"}',
     "column 'hash_ids'"),
])
def test_malformed_rows_name_file_row_and_column(tmp_path: Path, line: str, fragment: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError, match=re.escape(fragment)) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_time_going_backwards_is_refused(tmp_path: Path) -> None:
    rows = [{"arrival_s": 2, "prompt_tokens": 5, "output_tokens": 1},
            {"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError, match="row 2, column 'arrival_s'"):
        load_trace(path)


def test_empty_and_missing(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="holds no requests"):
        load_trace(tmp_path / "e.jsonl")
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "none.jsonl")




def test_azure_csv_loads_with_times_from_the_start() -> None:
    import csv
    from datetime import datetime

    azure = public_trace("azure_llm_2023_code.csv")
    with azure.open() as f:
        rows = list(csv.DictReader(f))
    first = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    last = datetime.fromisoformat(rows[-1]["TIMESTAMP"][:26])
    t = load_trace(public_trace("azure_llm_2023_code.csv"))
    assert len(t) == len(rows) == 8819
    assert t.duration_s == pytest.approx((last - first).total_seconds(), abs=1e-3)
    assert int(t.prompt_tokens.sum()) == sum(int(r["ContextTokens"]) for r in rows)
    part = t.slice(100, 20)
    assert len(part) == 20 and part.arrival_s[0] == 0
    assert part.prompt_tokens.tolist() == t.prompt_tokens[100:120].tolist()


def test_azure_csv_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,12,x\n")
    with pytest.raises(TraceError, match=re.escape("row 2, column 'GeneratedTokens'")):
        load_trace(path)


def test_prompt_text_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "prompt": "hi"}\n'
                    '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}\n')
    t = load_trace(path)
    assert t.text(0) == "hi" and t.text(1) is None
    assert t.to_rows()[0]["prompt"] == "hi" and "prompt" not in t.to_rows()[1]
    assert load_trace(DEMO_TRACE).text(0) is None
    path.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "prompt": 7}\n')
    with pytest.raises(TraceError, match="column 'prompt'"):
        load_trace(path)
