"""Calibrating the cpu profile from real vLLM CPU-build runs of the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import engine_python, vllm_processes
from workers.sim.calibrate import calibrate
from workers.sim.fidelity import fidelity_trace, measure_real
from workers.sim.profile import find_profile

pytestmark = pytest.mark.integration


def test_a_profile_fitted_to_real_engines_predicts_them_better(tmp_path: Path) -> None:
    measured = measure_real([{"max_num_seqs": 4}, {"max_num_seqs": 32}], fidelity_trace(24),
                            engine_python(), tmp_path)
    assert not [p for p in vllm_processes() if str(tmp_path) in p]  # its engines are gone
    assert len(measured) == 4 and all(m.observed["output_tok_s"] > 0 for m in measured)
    base = find_profile("cpu", "tiny-llama", "cpu", None)
    fitted, _, after, _ = calibrate(measured, base, max_evals=150)
    assert fitted.fit is not None
    # The bundled profile is a guess; fitted to these engines it must explain them clearly
    # better (the loss is the mean squared log error the fit minimises).
    assert fitted.fit["loss_after"] < 0.7 * fitted.fit["loss_before"]
    assert after["output_tok_s"] < 0.35
    assert fitted.coefficients != base.coefficients
