"""`autotune bench sweep` on the simulator (in-process) and on the vLLM CPU build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.cli.main import main
from autotune.traffic.trace import DEMO_TRACE

SIM = ["bench", "sweep", "--model", "Llama-3.1-8B", "--gpu", "H100", "--input-len", "512",
       "--output-len", "64"]
ROW_KEYS = {"max_concurrency", "num_prompts", "duration", "completed", "failed",
            "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput", "total_token_throughput",
            *(f"{s}_{m}_ms" for s in ("mean", "median", "p99")
              for m in ("ttft", "tpot", "itl", "e2el")), "send_clump_mean"}


def test_a_sim_sweep_prints_one_object_and_writes_the_same(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m" / "sweep.json"
    code = main([*SIM, "--max-concurrency", "1,8,32", "--prompts-per-client", "3",
                 "--json", "--out", str(out)])  # the default step model: measured
    printed = json.loads(capfd.readouterr().out)
    assert code == 0
    assert printed == json.loads(out.read_text())
    assert printed["kind"] == "autotune.bench_sweep" and printed["backend"] == "sim"
    assert printed["step_model"].startswith("measured table H100-80GB/Llama-3.1-8B/TP1/bf16")
    runs = printed["runs"]
    assert [r["max_concurrency"] for r in runs] == [1, 8, 32]
    assert [r["num_prompts"] for r in runs] == [3, 24, 96]  # per client
    assert all(set(r) == ROW_KEYS for r in runs)  # the simulator times no steps
    assert all(r["completed"] == r["num_prompts"] for r in runs)
    # More clients, more tokens per second, each of them slower.
    tput = [r["output_throughput"] for r in runs]
    assert tput == sorted(tput) and runs[-1]["median_tpot_ms"] > runs[0]["median_tpot_ms"]


def test_spread_client_starts_desynchronise_equal_requests(
        capfd: pytest.CaptureFixture[str]) -> None:
    """Equal requests from clients that start together stay phase-locked (each prompt waits
    for its clump's prefill); spread over one request's time, each prompt is prefilled beside
    the others' decodes, and TTFT falls. The record says which ran."""
    records = {}
    for starts in ("together", "spread"):
        code = main([*SIM, "--max-concurrency", "16", "--prompts-per-client", "6",
                     "--client-starts", starts, "--per-request", "--json"])
        records[starts] = json.loads(capfd.readouterr().out)
        assert code == 0 and records[starts]["load"]["client_starts"] == starts
    together, spread = (records[k]["runs"][0] for k in ("together", "spread"))
    assert spread["median_ttft_ms"] < 0.5 * together["median_ttft_ms"]
    # Together the 16 clients stay in clumps as the token budget first admitted them.
    assert spread["send_clump_mean"] == 1 < together["send_clump_mean"]
    assert spread["completed"] == together["completed"] == 96
    # --per-request: every request in send order; together, the first round all at once.
    sent = together["requests"]["sent_s"]
    assert len(sent) == 96 and sent == sorted(sent) and sent[:16] == [0.0] * 16 and sent[16] > 0
    assert together["requests"]["output_tokens"] == [64] * 96
    assert not any(together["requests"]["failed"])
    assert spread["mean_ttft_ms"] == pytest.approx(np.mean(spread["requests"]["ttft_ms"]),
                                                    abs=1e-3)


def test_a_traces_lengths_and_a_fixed_count(capfd: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "sweep", "--model", "Llama-3.1-8B", "--gpu", "H100", "--trace",
                 str(DEMO_TRACE), "--max-concurrency", "2,4", "--num-prompts", "20", "--json"])
    record = json.loads(capfd.readouterr().out)
    assert code == 0 and record["load"]["trace"] and record["load"]["input_len"] is None
    assert [r["num_prompts"] for r in record["runs"]] == [20, 20]


@pytest.mark.parametrize("args, fragment", [
    ([*SIM, "--max-concurrency", "1,x"], "comma-separated client counts"),
    ([*SIM, "--max-concurrency", "4,4"], "4 is given twice"),
    ([*SIM, "--max-concurrency", "0"], "at least 1"),
    ([*SIM, "--max-concurrency", "4", "--num-prompts", "8", "--prompts-per-client", "2"],
     "not both"),
    ([*SIM, "--max-concurrency", "4", "--trace", str(DEMO_TRACE)], "not both"),
    ([*SIM, "--max-concurrency", "4", "--max-model-len", "500"], "exceed max_model_len 500"),
    ([*SIM, "--max-concurrency", "4", "--backend", "vllm", "--step-model", "measured"],
     "--step-model, --step-precision"),
    (["bench", "sweep", "--max-concurrency", "4", "--input-len", "8", "--output-len", "8"],
     "--backend sim needs --model"),
    (["bench", "sweep", "--backend", "vllm", "--max-concurrency", "4", "--input-len", "8",
      "--output-len", "8"], "needs --model-path"),
    ([*SIM, "--max-concurrency", "4", "--backend", "tgi"], "expected sim or vllm"),
    ([*SIM, "--max-concurrency", "4", "--client-starts", "staggered"],
     "client_starts='staggered': expected one of together, spread"),
    (["bench", "sweep", "--backend", "vllm", "--max-concurrency", "4", "--input-len", "8",
      "--output-len", "8", "--client-starts", "spread"], "spread is for --backend sim"),
])
def test_bad_input_is_one_line_and_writes_nothing(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], args: list[str],
        fragment: str) -> None:
    out = tmp_path / "sweep.json"
    code = main([*args, "--out", str(out)])
    err = [x for x in capfd.readouterr().err.splitlines() if x.strip()]
    assert code == 2 and len(err) == 1 and fragment in err[0], err
    assert not out.exists()


@pytest.mark.integration
@pytest.mark.e2e
def test_a_real_cpu_engine_sweep_and_its_cpu_cost_fit(tmp_path: Path) -> None:
    """One vLLM CPU-build engine for two concurrencies; its decode steps, less the roofline's
    GPU (here: CPU-build compute) time, fit the profile's CPU step cost, which `sim fit-cpu`
    writes and checks against the sweep's TPOT."""
    from autotune.measure.tiny_model import make_tiny_model
    from autotune.workers.sim.profile import load_profile
    from tests.conftest import engine_python, run_cli, vllm_processes

    model = make_tiny_model(tmp_path / "tiny")
    out = tmp_path / "real.json"
    env = {"AUTOTUNE_ENGINE__PYTHON": engine_python(),
           "AUTOTUNE_ENGINE__LOG_DIR": str(tmp_path / "logs")}
    proc = run_cli("bench", "sweep", "--backend", "vllm", "--model", "tiny-llama", "--gpu", "cpu",
                   "--model-path", str(model), "--engine-arg=--load-format=dummy",
                   "--engine-arg=--enforce-eager", "--max-concurrency", "1,4", "--input-len",
                   "64", "--output-len", "64", "--prompts-per-client", "4", "--max-model-len",
                   "2048", "--per-request", "--json", "--out", str(out), env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert vllm_processes() == []  # one engine, stopped
    record = json.loads(proc.stdout)
    assert record == json.loads(out.read_text())
    assert record["backend"] == "vllm" and record["step_model"] is None
    assert record["extra_engine_args"] == ["--load-format", "dummy", "--enforce-eager"]
    for run in record["runs"]:
        assert ROW_KEYS <= set(run)
        assert run["completed"] == run["num_prompts"] and run["total_output_tokens"] == (
            64 * run["num_prompts"])
        decode = [s for s in run["step_times"] if s["prompt_tokens"] == 0]
        assert run["max_concurrency"] in {s["batch"] for s in decode}
        # Each request as the client saw it: the real engine's clients all start at once.
        sent = run["requests"]["sent_s"]
        assert len(sent) == run["num_prompts"] and sent == sorted(sent) and sent[0] == 0.0
        assert run["requests"]["output_tokens"] == [64] * run["num_prompts"]
        assert run["mean_ttft_ms"] == pytest.approx(np.mean(run["requests"]["ttft_ms"]), abs=1e-3)
        assert 1 <= run["send_clump_mean"] <= run["max_concurrency"]

    profile = tmp_path / "fitted.yaml"
    fit = run_cli("sim", "fit-cpu", str(out), "--step-model", "roofline", "--out", str(profile),
                  "--json")
    assert fit.returncode == 0, fit.stderr[-3000:]
    summary = json.loads(fit.stdout)
    fitted = load_profile(profile)
    assert fitted.fit is not None and fitted.fit["kind"] == "fit-cpu"
    assert summary["coefficients"]["cpu_step_s"] == fitted.coefficients.cpu_step_s > 0
    assert [r["max_concurrency"] for r in summary["tpot_check"]] == [1, 4]
    assert summary["unmodelled_engine_args"] == ["--enforce-eager"]
