"""Every importer on real or realistic files, checked against figures computed here directly
with the csv and json modules."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from autotune.cli.flags import flag_message
from autotune.errors import ConfigError, TraceError
from autotune.traffic.capture_format import CaptureRecord
from autotune.traffic.formats import detect_format, import_file
from autotune.traffic.formats.mapped import parse_mapping
from autotune.traffic.parquet_store import read_parquet
from tests.conftest import public_trace, run_cli


def _pct(values: list[int]) -> dict[str, float]:
    return {f"p{q}": float(np.percentile(np.array(values), q)) for q in (50, 90, 99)}


def test_azure_imports_through_the_cli(tmp_path: Path) -> None:
    src = public_trace("azure_llm_2023_code.csv")
    with src.open(newline="") as f:
        raw = list(csv.DictReader(f))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in raw]
    out = tmp_path / "azure.parquet"
    proc = run_cli("traffic", "import", str(src), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "8,819 requests (azure)" in proc.stdout
    t = read_parquet(out)
    assert len(t) == len(raw) == 8819
    assert t.duration_s == pytest.approx((max(stamps) - min(stamps)).total_seconds(), abs=1e-3)
    assert t.start_epoch_s == pytest.approx(min(stamps).replace(tzinfo=UTC).timestamp(), abs=1e-3)
    prompts = [int(r["ContextTokens"]) for r in raw]
    outputs = [int(r["GeneratedTokens"]) for r in raw]
    assert t.prompt_tokens.tolist() == prompts  # the published file is sorted: order is kept
    assert _pct(t.output_tokens.tolist()) == pytest.approx(_pct(outputs))


def test_mooncake_imports_with_its_hash_blocks(tmp_path: Path) -> None:
    src = public_trace("mooncake_synthetic.jsonl")
    raw = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    imported = import_file(src)
    t = imported.trace
    assert imported.format == "mooncake" and len(t) == len(raw) == 3993
    assert t.duration_s == pytest.approx((raw[-1]["timestamp"] - raw[0]["timestamp"]) / 1000)
    assert t.hash_block_tokens == 512 and t.start_epoch_s is None
    assert _pct(t.prompt_tokens.tolist()) == pytest.approx(_pct([r["input_length"] for r in raw]))
    assert [list(h) for h in t.hash_ids] == [r["hash_ids"] for r in raw]
    # Equal timestamps (the file has 11 repeats) are kept, not nudged.
    assert len(set(t.arrival_s.tolist())) == len({r["timestamp"] for r in raw}) < len(raw)


BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _burstgpt(tmp_path: Path) -> Path:
    rows = [(5.0, "ChatGPT", 472, 18, "Conversation log"), (45.0, "ChatGPT", 1087, 0, "API log"),
            (118.0, "GPT-4", 417, 276, "Conversation log"), (12.0, "ChatGPT", 30, 7, "API log"),
            (160.5, "GPT-4", 2000, 0, "Conversation log"), (200.0, "ChatGPT", 80, 90, "API log")]
    path = tmp_path / "burst.log"  # the name says nothing: the content decides
    path.write_text(BURST_HEADER + "".join(f"{t},{m},{a},{b},{a + b},{k}\n" for t, m, a, b, k in rows))
    return path


def test_burstgpt_drops_failed_rows_sorts_and_filters_by_model(tmp_path: Path) -> None:
    path = _burstgpt(tmp_path)
    assert detect_format(path) == "burstgpt"
    imported = import_file(path)
    t = imported.trace
    assert t.prompt_tokens.tolist() == [472, 30, 417, 80]  # sorted by time, failures dropped
    assert t.arrival_s.tolist() == [0.0, 7.0, 113.0, 195.0]
    assert imported.notes == ("dropped 2 failed requests (zero response tokens)",)
    gpt4 = import_file(path, model="GPT-4")
    assert gpt4.trace.prompt_tokens.tolist() == [417]
    assert any("dropped 4 rows of other models" in n for n in gpt4.notes)
    with pytest.raises(TraceError, match="no rows of model 'Claude'.*ChatGPT, GPT-4"):
        import_file(path, model="Claude")
    with pytest.raises(ConfigError, match="^model filters BurstGPT"):
        import_file(public_trace("mooncake_synthetic.jsonl"), model="GPT-4")


def test_capture_log_round_trips_every_field(tmp_path: Path) -> None:
    records = [
        CaptureRecord(ts=1_767_225_601.5, api="completion", prompt_tokens=40, output_tokens=9,
                      max_tokens=16, hash_ids=(7,), hash_block_tokens=32, tenant="ads"),
        CaptureRecord(ts=1_767_225_600.25, api="chat", prompt_tokens=812, output_tokens=96,
                      max_tokens=None, hash_ids=(1, 2), hash_block_tokens=32,
                      session_id="s-1", priority=2, text="hello"),
    ]
    path = tmp_path / "capture-0001.jsonl"
    path.write_text("".join(r.to_json_line() for r in records))
    imported = import_file(path)
    t = imported.trace
    assert imported.format == "openai-log"
    assert t.start_epoch_s == 1_767_225_600.25 and t.arrival_s.tolist() == [0.0, 1.25]
    assert t.apis == ("chat", "completion") and t.max_tokens == (None, 16)
    assert t.hash_ids == ((1, 2), (7,)) and t.hash_block_tokens == 32
    assert t.session_ids == ("s-1", None) and t.tenants == (None, "ads")
    assert t.priorities == (2, None) and t.texts == ("hello", None)
    path.write_text(records[0].to_json_line().replace('"v":1', '"v":2'))
    with pytest.raises(TraceError, match="row 1, column 'v': capture format version 2"):
        import_file(path)


def test_mapped_jsonl_with_dotted_paths_and_ms(tmp_path: Path) -> None:
    lines = [{"time": 1000, "req": {"path": "/v1/chat/completions", "max_tokens": 64},
              "usage": {"prompt_tokens": 12, "completion_tokens": 5}, "user": "u1"},
             {"time": 1500, "req": {"path": "/v1/completions"},
              "usage": {"prompt_tokens": 30, "completion_tokens": 8}, "user": "u2"}]
    path = tmp_path / "gateway.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    mapping = parse_mapping("arrival=time,prompt_tokens=usage.prompt_tokens,"
                            "output_tokens=usage.completion_tokens,api=req.path,"
                            "max_tokens=req.max_tokens,tenant=user")
    t = import_file(path, mapping=mapping, time_unit="ms").trace
    assert t.arrival_s.tolist() == [0.0, 0.5] and t.prompt_tokens.tolist() == [12, 30]
    assert t.apis == ("chat", "completion") and t.max_tokens == (64, None)
    assert t.tenants == ("u1", "u2")
    lines[1]["usage"] = {"prompt_tokens": -3, "completion_tokens": 8}
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(TraceError, match=r"row 2, column 'usage.prompt_tokens': must be at least 1"):
        import_file(path, mapping=mapping, time_unit="ms")


def test_mapped_csv_with_iso_times_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "access.csv"
    path.write_text("when,in,out,who\n2026-01-01T00:00:02Z,100,10,a\n"
                    "2026-01-01T00:00:00Z,50,5,\n")
    out = tmp_path / "mapped.parquet"
    proc = run_cli("traffic", "import", str(path), "--out", str(out), "--map",
                   "arrival=when,prompt_tokens=in,output_tokens=out,tenant=who", "--time-unit", "iso")
    assert proc.returncode == 0, proc.stderr
    t = read_parquet(out)
    assert t.prompt_tokens.tolist() == [50, 100] and t.arrival_s.tolist() == [0.0, 2.0]
    assert t.tenants == (None, "a")
    assert t.start_epoch_s == datetime.fromisoformat("2026-01-01T00:00:00+00:00").timestamp()
    bad = run_cli("traffic", "import", str(path), "--out", str(tmp_path / "x.parquet"),
                  "--map", "arrival=when,prompt_tokens=tokens,output_tokens=out")
    assert bad.returncode == 2 and "column 'tokens': missing from the header" in bad.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_mapping_errors_say_what_to_write() -> None:
    with pytest.raises(ConfigError, match="needs output_tokens"):
        parse_mapping("arrival=ts,prompt_tokens=p")
    with pytest.raises(ConfigError, match="target 'latency' is unknown"):
        parse_mapping("arrival=ts,prompt_tokens=p,output_tokens=o,latency=l")


def test_unknown_csv_is_refused_with_the_map_hint(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match="no importer recognises; import it with map ") as info:
        import_file(path)
    # The library names its setting; the CLI renders it as the flag.
    assert "import it with --map " in flag_message(info.value)
