"""The synthetic generator: burstier Gamma arrivals and a document mix, demo trace unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.traffic.formats import load_trace
from autotune.traffic.synthetic import chat_trace_rows
from autotune.traffic.trace import DEMO_TRACE
from tests.conftest import run_cli


def _gap_cv(rows: list[dict[str, object]]) -> float:
    gaps = np.diff([float(r["arrival_s"]) for r in rows])  # type: ignore[arg-type]
    return float(gaps.std() / gaps.mean())


def test_defaults_still_give_the_bundled_demo_trace() -> None:
    assert chat_trace_rows() == [json.loads(line) for line in DEMO_TRACE.read_text().splitlines()]


def test_gamma_arrivals_are_burstier_at_the_same_mean_rate() -> None:
    poisson = chat_trace_rows(requests=4000, seed=3)
    gamma = chat_trace_rows(requests=4000, seed=3, arrivals="gamma", gap_cv=3.0)
    assert _gap_cv(gamma) > 1.5 * _gap_cv(poisson)
    span = float(gamma[-1]["arrival_s"]) / float(poisson[-1]["arrival_s"])  # type: ignore[arg-type]
    assert 0.8 < span < 1.25  # the same rate, give or take the draws


def test_a_document_share_mixes_in_long_prompts_with_short_answers() -> None:
    rows = chat_trace_rows(requests=3000, seed=1, document_share=0.25)
    chat = chat_trace_rows(requests=3000, seed=1)

    def long_prompts(rs: list[dict[str, object]]) -> list[dict[str, object]]:
        return [r for r in rs if int(str(r["prompt_tokens"])) >= 2000]

    assert len(long_prompts(chat)) / len(chat) < 0.05  # chat turns are rarely that long
    assert 0.2 < len(long_prompts(rows)) / len(rows) < 0.32
    assert np.median([int(str(r["output_tokens"])) for r in long_prompts(rows)]) < np.median(
        [int(str(r["output_tokens"])) for r in chat])


def test_synth_command_writes_a_loadable_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = run_cli("traffic", "synth", "--out", str(out), "--requests", "200", "--arrivals",
                   "gamma", "--gap-cv", "2.5", "--document-share", "0.3")
    assert proc.returncode == 0, proc.stderr
    assert len(load_trace(out)) == 200


@pytest.mark.parametrize("args", [["--arrivals", "weibull"], ["--gap-cv", "0"],
                                  ["--document-share", "1.5"]])
def test_bad_synth_flags_are_one_line(tmp_path: Path, args: list[str]) -> None:
    proc = run_cli("traffic", "synth", "--out", str(tmp_path / "t.jsonl"), *args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t.jsonl").exists()
