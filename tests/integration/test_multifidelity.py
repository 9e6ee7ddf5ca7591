"""A multi-fidelity campaign through the normal command: `autotune tune --screen sim --confirm
vllm` screens the space on the simulator (the CPU build's `cpu` profile and the tiny-llama
catalogue entry: the same deployment), then the baselines and the 2 best screened configs run
on real vLLM CPU-build engines with a tiny local model, and only those real results are ranked,
published and served."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from autotune.search.baselines import BASELINES
from autotune.storage.models import Campaign, Trial
from autotune.traffic.formats import load_trace
from autotune.traffic.synthetic import write_jsonl
from tests.conftest import engine_python, public_trace, run_cli, vllm_processes

pytestmark = pytest.mark.integration
SCREEN_TRIALS, TOP = 8, 2


def _key(t: Trial) -> str:
    return json.dumps(t.engine_config, sort_keys=True)


def test_sim_screening_then_real_engines_for_the_top_2(tmp_path: Path) -> None:
    python = engine_python()
    model = tmp_path / "tiny"
    assert run_cli("models", "make-tiny", str(model)).returncode == 0
    trace = tmp_path / "azure-code-slice.jsonl"
    # As in tests/integration/test_vllm_campaign.py: 30 requests in 3 s, prompts capped at 64 tokens so
    # the tiny CPU engine can meet an SLO at all.
    rows = load_trace(public_trace("azure_llm_2023_code.csv")).slice(2000, 30).to_rows()
    write_jsonl([{**r, "prompt_tokens": min(int(str(r["prompt_tokens"])), 64)} for r in rows],
                trace)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    env = {"AUTOTUNE_DATABASE_URL": url, "AUTOTUNE_ENGINE__PYTHON": python,
           "AUTOTUNE_ENGINE__LOG_DIR": str(tmp_path / "logs")}
    assert run_cli("db", "upgrade", env=env).returncode == 0
    tune = run_cli(
        "tune", "--screen", "sim", "--confirm", "vllm", "--screen-top", str(TOP),
        "--deployment", "cpu-tiny", "--campaign", "mf", "--model", "tiny-llama", "--gpu", "cpu",
        "--gpus", "1", "--max-model-len", "2048", "--model-path", str(model),
        "--engine-arg=--load-format=dummy", "--engine-arg=--enforce-eager", "--trace", str(trace),
        "--trials", str(SCREEN_TRIALS), "--max-scale", "8", "--bisect-steps", "1",
        "--slo", "ttft_p99<=3s,tpot_p99<=300ms", "--max-send-lag-ms", "1000",
        # Confirmation on real engines is covered by tests/campaign/test_multifidelity.py; here
        # it would add 4 engine starts to the 4 of the real phase.
        "--confirm-top", "0",
        env=env, timeout=1500)
    assert tune.returncode == 0, tune.stderr[-4000:]
    assert [p for p in vllm_processes() if str(model) in p] == [], "an engine was left running"

    engine = sa.create_engine(url)
    with Session(engine) as s:
        c = s.scalars(sa.select(Campaign)).one()
        assert (c.status, c.backend, c.screen_backend, c.screen_top) == (
            "completed", "vllm", "sim", TOP)
        trials = list(s.scalars(sa.select(Trial).order_by(Trial.number)))
    engine.dispose()
    sim = [t for t in trials if t.fidelity == "sim"]
    real = [t for t in trials if t.fidelity == "vllm"]
    assert sum(t.state != "rejected" and t.repeat_of is None for t in sim) == SCREEN_TRIALS
    logs = tmp_path / "logs"
    assert all(t.gpu_hours == 0 and not (logs / f"cpu-tiny_mf-trial{t.number}.log").exists()
               for t in sim), "screening started no engine"

    # The real phase: both baselines, then the 2 best feasible distinct other screened configs.
    # (vLLM has no recipe for the tiny model on a CPU: two baselines.)
    roles = [r for r in BASELINES if any(t.role == r for t in sim)]
    assert roles == ["vllm-default", "guide-heuristic"]
    baselines = {r: next(t for t in sim if t.role == r) for r in roles}
    taken = {_key(b) for b in baselines.values()}
    top: list[str] = []
    for t in sorted((t for t in sim if t.feasible and t.repeat_of is None),
                    key=lambda t: (-t.capacity_output_tok_s, t.number)):
        if _key(t) not in taken and _key(t) not in top:
            top.append(_key(t))
    assert sorted(_key(t) for t in real) == sorted([*taken, *top[:TOP]])
    assert len(real) == len(baselines) + TOP and {t.role for t in real} >= set(baselines)
    for t in real:  # each one a real engine, started and replayed
        assert t.start_s > 0 and (logs / f"cpu-tiny_mf-trial{t.number}.log").exists()
        assert t.state != "measured" or t.latency_recorded_rate["completed"] == 30
    assert all(t.state == "measured" for t in real if t.role in BASELINES), \
        [(t.role, t.failure_class, t.failure_message) for t in real]

    # Fed back into the same study, each trial marked with the backend that measured it.
    study = optuna.load_study(study_name="cpu-tiny:mf", storage=url)
    attrs = {t.number: t.user_attrs for t in study.trials}
    assert all(attrs[t.number]["fidelity"] == t.fidelity for t in trials)
    assert all(_key(next(x for x in sim if x.number == attrs[t.number]["screen_of"])) == _key(t)
               for t in real)

    # The winner and the publication come from the real trials only.
    best = max((t for t in real if t.feasible), key=lambda t: t.capacity_output_tok_s)
    pub = run_cli("publish", "--campaign", "mf", env=env)
    assert pub.returncode == 0 and f"published trial {best.number} " in pub.stdout, pub.stdout
    refused = run_cli("publish", "--campaign", "mf", "--trial", str(sim[0].number), env=env)
    assert refused.returncode == 2 and "screened on the sim simulator" in refused.stderr
    out = tmp_path / "report"
    assert run_cli("report", "--campaign", "mf", "--out", str(out), env=env).returncode == 0
    assert "screened on sim" in (out / "index.html").read_text()
