"""Calibrating the cpu profile from real vLLM CPU-build runs of the tiny model."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from autotune.workers.sim.calibrate import calibrate, loss_of
from autotune.workers.sim.fidelity import (
    HOST_PROBE,
    HOST_PROBE_DRIFT,
    HOST_STEAL,
    fidelity_trace,
    measure_real,
    pooled_ttft_p99_ms,
)
from autotune.workers.sim.profile import find_profile
from tests.conftest import engine_python, vllm_processes

pytestmark = pytest.mark.integration


def test_a_fit_to_real_engines_finds_them_from_a_wrong_profile(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autotune.fidelity")
    measured = measure_real([{"max_num_seqs": 4}, {"max_num_seqs": 32}], fidelity_trace(24),
                            engine_python(), tmp_path)
    assert not [p for p in vllm_processes() if str(tmp_path) in p]  # its engines are gone
    # One progress line per engine: a long run shows early how fast its host is.
    assert [r.getMessage().split(":")[0] for r in caplog.records
            if r.name == "autotune.fidelity"] == [
        "engine 1 of 2 (max_num_seqs=4)", "engine 2 of 2 (max_num_seqs=32)"]
    assert len(measured) == 4 and all(m.observed["output_tok_s"] > 0 for m in measured)
    # Each request's TTFT is kept, and its P99 is the replay's own.
    for m in measured:
        assert len(m.ttft_each_ms) == 24
        assert pooled_ttft_p99_ms([m]) == pytest.approx(m.observed["ttft_p99_ms"], abs=0.01)
        # The host's steal while it ran: a share of the CPUs' time.
        assert 0 <= m.observed[HOST_STEAL] <= 100
    # The host-speed probe: one engine's replays share its lone-request TPOT, a one-sequence
    # step of a few milliseconds, and the drift between the two probes around them is recorded.
    # How far the host drifts is the shared machine's, not the code's (a CI run beside other
    # jobs saw -51%), so only its presence is asserted; the fidelity benchmark reports it.
    for engine in (measured[:2], measured[2:]):
        assert len({m.observed[HOST_PROBE] for m in engine}) == 1
        assert 0.3 < engine[0].observed[HOST_PROBE] < 200
        assert np.isfinite(engine[0].observed[HOST_PROBE_DRIFT])
    # The engine's decode steps, read off its token streams: batches it can run, timed (how
    # long is the host's business, not the test's), more context for a larger batch.
    steps = {(m.config.max_num_seqs, s.batch): s for m in measured for s in m.step_times
             if not s.prompt_tokens}
    assert steps, "no replay gave decode step timings"
    for (seqs, batch), s in steps.items():
        assert 1 <= batch <= seqs and s.step_ms > 0 and s.gaps >= 20
        assert 32 * batch < s.kv_tokens < 900 * batch  # prompts of 32-768 tokens, <96 generated
    # Its prefill steps: a fidelity prompt beside decodes the engine could run, each step
    # longer, in the median, than a decode step of the same batch.
    prefills = [(m.config.max_num_seqs, s) for m in measured for s in m.step_times
                if s.prompt_tokens]
    assert prefills, "no replay gave prefill step timings"
    for seqs, s in prefills:
        assert 32 <= s.prompt_tokens < 768 and 1 <= s.batch < seqs and 1 <= s.gaps <= s.batch
    ratios = [s.step_ms / steps[seqs, s.batch].step_ms for seqs, s in prefills
              if (seqs, s.batch) in steps]
    assert ratios and float(np.median(ratios)) > 1.0
    bundled = find_profile("cpu", "tiny-llama", "cpu", None)
    c = bundled.coefficients
    # Start from a clearly wrong profile (CPU costs 8x too high): the bundled one was itself
    # fitted to such engines, so how much a fit beats it on four short, noisy replays is luck
    # (it once improved on it by 23%, once by more than 30%).
    wrong = bundled.with_coefficients(cpu_step_s=8 * c.cpu_step_s,
                                      cpu_prefill_token_s=8 * c.cpu_prefill_token_s)
    fitted, _, after, _ = calibrate(measured, wrong, max_evals=150)
    assert fitted.fit is not None
    # The fit finds these engines (the loss is the mean squared log error it minimises) ...
    assert fitted.fit["loss_after"] < 0.5 * fitted.fit["loss_before"]
    assert after["output_tok_s"] < 0.35 and "decode_step_ms" in after
    assert fitted.coefficients != wrong.coefficients
    # ... about as well as the bundled profile explains them, or better.
    assert fitted.fit["loss_after"] < 1.5 * loss_of(measured, bundled)
