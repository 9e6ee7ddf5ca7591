"""`autotune simulate` and `autotune sim calibrate` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.domain.records import LatencySummary
from autotune.traffic.trace import DEMO_TRACE
from tests.conftest import public_trace, run_cli

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


def test_simulate_prints_one_json_summary_with_a_trials_fields() -> None:
    proc = run_cli("simulate", "--trace", str(DEMO_TRACE), "--model", "Llama-3.1-8B", "--gpu",
                   "H100", "--tp", "1", "--rate-scale", "2", "--set", "max_num_seqs=64",
                   "--set", "enable-prefix-caching=false", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = LatencySummary.model_validate(json.loads(proc.stdout))
    assert summary.requests == 600 and summary.completed == 600
    assert summary.engine_stats["prefix_cache_hit_rate"] == 0  # the --set took effect


def test_simulate_reads_any_importable_trace() -> None:
    proc = run_cli("simulate", "--trace", str(public_trace("azure_llm_2023_code.csv")), "--json",
                   "--max-model-len", "32768")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["requests"] == 8819


@pytest.mark.parametrize("model, gpu, tp", [
    ("Qwen/Qwen3-32B", "H100", "2"),  # dense, by Hugging Face id (a vendored config)
    ("dir:openai--gpt-oss-120b", "H100", "2"),  # MoE with sliding-window layers, a directory
    ("file:MiniMaxAI--MiniMax-M2.5", "H200", "4"),  # MoE, FP8 blocks, a config.json path
])
def test_simulate_runs_judge_models_from_any_config(tmp_path: Path, model: str, gpu: str,
                                                     tp: str) -> None:
    from autotune.domain.model_sources import VENDORED

    kind, _, stem = model.partition(":")
    if stem:  # a checkpoint directory holding config.json, or the file itself
        (tmp_path / "ckpt").mkdir()
        config = tmp_path / "ckpt" / "config.json"
        config.write_text((VENDORED / f"{stem}_config.json").read_text())
        model = str(config.parent if kind == "dir" else config)
    proc = run_cli("simulate", "--trace", str(DEMO_TRACE), "--model", model, "--gpu", gpu,
                   "--tp", tp, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed"] == 600


@pytest.mark.parametrize("args, fragment", [
    (["--set", "max_num_seq=8"], "max_num_seq"),
    (["--set", "swap_space=4"], "swap_space"),
    (["--set", "max_num_seqs"], "expected name=value"),
    (["--rate-scale", "0"], "--rate-scale"),
    (["--model", "GPT-9"], "unknown model"),
    (["--model", "acme/no-such-model"], "unknown model 'acme/no-such-model'"),
    (["--model", "missing/config.json"], "no such file or directory"),
    (["--set", "max_num_seqs=512", "--set", "max_num_batched_tokens=256"],
     "max_num_batched_tokens must be >= max_num_seqs"),
    (["--set", "gpu_memory_utilization=0.999"], "less than desired GPU memory utilization"),
])
def test_bad_simulate_input_is_one_line(args: list[str], fragment: str) -> None:
    proc = run_cli("simulate", "--trace", str(DEMO_TRACE), *args)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr


def test_simulate_closed_loop_with_fixed_lengths() -> None:
    proc = run_cli("simulate", "--max-concurrency", "16", "--num-prompts", "200", "--input-len",
                   "1000", "--output-len", "100", "--model", "Llama-3.1-8B", "--gpu", "H100",
                   "--tp", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["load"] == {"mode": "closed_loop", "max_concurrency": 16, "num_prompts": 200,
                           "lengths": "fixed 1000 in / 100 out", "client_starts": "together"}
    summary = LatencySummary.model_validate(out)
    assert summary.completed == 200
    assert summary.output_tok_s * summary.duration_s == pytest.approx(200 * 100)
    spread = run_cli("simulate", "--max-concurrency", "16", "--num-prompts", "200",
                     "--input-len", "1000", "--output-len", "100", "--model", "Llama-3.1-8B",
                     "--gpu", "H100", "--tp", "1", "--client-starts", "spread", "--json")
    assert spread.returncode == 0, spread.stderr
    desynchronised = json.loads(spread.stdout)
    assert desynchronised["load"]["client_starts"] == "spread"
    assert desynchronised["ttft_p50_ms"] < 0.5 * out["ttft_p50_ms"]  # no clump to wait for
    # Each run reports the other start state beside its own: a real engine lies between.
    assert out["other_client_starts"] == {
        "client_starts": "spread",
        **{k: desynchronised[k] for k in ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms",
                                          "tpot_p50_ms")}}
    assert desynchronised["other_client_starts"]["ttft_p50_ms"] == out["ttft_p50_ms"]


def test_simulate_closed_loop_takes_a_traces_lengths_and_open_loop_says_so() -> None:
    closed = run_cli("simulate", "--trace", str(DEMO_TRACE), "--max-concurrency", "8",
                     "--num-prompts", "50", "--json")
    assert closed.returncode == 0, closed.stderr
    out = json.loads(closed.stdout)
    assert out["requests"] == 50 and out["load"]["lengths"] == "from the trace"
    assert "other_client_starts" not in out  # a trace's lengths differ: no lock-step to bound
    opened = run_cli("simulate", "--trace", str(DEMO_TRACE), "--json")
    assert json.loads(opened.stdout)["load"] == {"mode": "open_loop", "rate_scale": 1.0}


@pytest.mark.parametrize("args, fragment", [
    (["--max-concurrency", "0", "--input-len", "10", "--output-len", "10"], "at least 1 client"),
    (["--max-concurrency", "4"], "needs lengths"),
    (["--max-concurrency", "4", "--input-len", "16000", "--output-len", "500"],
     "exceed max_model_len 16384"),
    (["--max-concurrency", "4", "--input-len", "100"], "go together"),
    (["--max-concurrency", "4", "--trace", str(DEMO_TRACE), "--input-len", "1",
      "--output-len", "1"], "not both"),
    (["--max-concurrency", "4", "--trace", str(DEMO_TRACE), "--rate-scale", "2"],
     "--rate-scale applies to an open loop"),
    (["--input-len", "100", "--output-len", "10"], "add --max-concurrency"),
    (["--trace", str(DEMO_TRACE), "--client-starts", "spread"],
     "--client-starts applies to a closed loop"),
    (["--max-concurrency", "4", "--input-len", "10", "--output-len", "10", "--client-starts",
      "late"], "client_starts='late': expected one of together, spread"),
    ([], "needs --trace"),
])
def test_bad_closed_loop_input_is_one_line(args: list[str], fragment: str) -> None:
    proc = run_cli("simulate", *args)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr


def test_calibrate_fits_and_saves_a_profile_from_a_campaign(tmp_path: Path,
                                                            migrated_sqlite: str) -> None:
    env = {"AUTOTUNE_DATABASE_URL": migrated_sqlite,
           "AUTOTUNE_SIM__PROFILE_DIR": str(tmp_path / "profiles")}
    tune = run_cli("tune", "--deployment", "tiny", "--campaign", "c1", "--model", "tiny-llama",
                   "--gpu", "cpu", "--gpus", "1", "--max-model-len", "2048", "--trials", "4",
                   "--slo", "ttft_p99<=5s,tpot_p99<=500ms", "--max-scale", "8", env=env)
    assert tune.returncode == 0, tune.stderr
    proc = run_cli("sim", "calibrate", "--campaign", "c1", "--max-evals", "40", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "ran on the simulator" in proc.stdout and "saved" in proc.stdout
    saved = list((tmp_path / "profiles").glob("cpu__tiny-llama__v*.yaml"))
    assert [p.name for p in saved] == ["cpu__tiny-llama__v2.yaml"]
    missing = run_cli("sim", "calibrate", "--campaign", "nope", env=env)
    assert missing.returncode == 2 and "no campaign named 'nope'" in missing.stderr
