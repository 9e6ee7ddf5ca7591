"""Simulator profiles: bundled defaults, versioned calibrated ones, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.workers.sim.profile import find_profile, load_profile, save_profile


def test_bundled_defaults_per_device_kind(tmp_path: Path) -> None:
    gpu = find_profile("H200-141GB", "DeepSeek-V4-Flash", "gpu", tmp_path)
    cpu = find_profile("cpu", "tiny-llama", "cpu", tmp_path)
    assert gpu.version == cpu.version == 1
    assert (gpu.gpu, gpu.model) == ("H200-141GB", "DeepSeek-V4-Flash")
    assert gpu.coefficients.cuda_graph_gib > 0 and cpu.coefficients.cuda_graph_gib == 0


def test_saved_profiles_get_the_next_version_and_the_newest_wins(tmp_path: Path) -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", tmp_path)
    first = save_profile(base.with_coefficients(cpu_step_s=0.01), tmp_path)
    second = save_profile(base.with_coefficients(cpu_step_s=0.02), tmp_path)
    assert first.name == "cpu__tiny-llama__v2.yaml" and second.name == "cpu__tiny-llama__v3.yaml"
    found = find_profile("cpu", "tiny-llama", "cpu", tmp_path)
    assert found.version == 3 and found.coefficients.cpu_step_s == 0.02
    assert load_profile(first).coefficients.cpu_step_s == 0.01  # never overwritten
    # Another model on the same device still gets the bundled default.
    assert find_profile("cpu", "Llama-3.1-8B", "cpu", tmp_path).version == 1
    assert not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("text, message", [
    ("just a string", "mapping"),
    ("version: 1\ncoefficients: {cpu_step_s: 1}", "missing"),
    ("version: x\ncoefficients: {}", "missing"),
    (": : :", "cannot read"),
])
def test_a_bad_profile_file_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_profile(path)


def test_negative_coefficients_are_refused(tmp_path: Path) -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None)
    path = tmp_path / "neg.yaml"
    path.write_text(base.with_coefficients(cpu_step_s=-1.0).to_yaml())
    with pytest.raises(ConfigError, match="negative"):
        load_profile(path)


def test_a_profile_from_before_attention_efficiency_still_loads(tmp_path: Path) -> None:
    """Calibrated profiles saved before the coefficient existed keep working, at 1 (attention
    as efficient as the rest): no file a user saved is lost to an upgrade."""
    base = find_profile("cpu", "tiny-llama", "cpu", tmp_path)
    text = base.with_coefficients(attention_efficiency=0.3).to_yaml()
    old = tmp_path / "old.yaml"
    old.write_text("\n".join(line for line in text.splitlines()
                             if "attention_efficiency" not in line))
    assert load_profile(old).coefficients.attention_efficiency == 1.0
    saved = save_profile(base.with_coefficients(attention_efficiency=0.3), tmp_path)
    assert load_profile(saved).coefficients.attention_efficiency == 0.3


def test_attention_efficiency_scales_only_attention() -> None:
    from autotune.domain.catalogue import gpu, model
    from autotune.workers.sim.perf import EngineShape, PerfModel

    shape = EngineShape(max_num_seqs=16, max_num_batched_tokens=2048, block_size=32,
                        enable_chunked_prefill=True, enable_prefix_caching=True,
                        gpu_memory_utilization=0.9, max_model_len=2048, tensor_parallel_size=1)
    base = find_profile("cpu", "tiny-llama", "cpu", None)

    def perf(eff: float) -> PerfModel:
        return PerfModel(gpu("cpu"), model("tiny-llama"), shape,
                         base.with_coefficients(attention_efficiency=eff))

    full, half = perf(1.0), perf(0.5)
    # No context, no attention: the same step. Each KV token read costs twice as much.
    assert half.step_s(8, 0.0) == pytest.approx(full.step_s(8, 0.0))
    kv_cost = full.step_s(8, 4000.0) - full.step_s(8, 0.0)
    assert kv_cost > 0
    assert half.step_s(8, 4000.0) - half.step_s(8, 0.0) == pytest.approx(2 * kv_cost)


def test_the_small_batch_surcharge_makes_the_step_concave_in_its_batch() -> None:
    """The first small_batch_seqs sequences of a step each cost cpu_small_batch_seq_s more; the
    rest cost cpu_seq_s alone. 0 (profiles from before it) leaves the step as it was."""
    from autotune.domain.catalogue import gpu, model
    from autotune.workers.sim.perf import EngineShape, PerfModel

    shape = EngineShape(max_num_seqs=32, max_num_batched_tokens=2048, block_size=32,
                        enable_chunked_prefill=True, enable_prefix_caching=True,
                        gpu_memory_utilization=0.9, max_model_len=2048, tensor_parallel_size=1)
    base = find_profile("cpu", "tiny-llama", "cpu", None)
    assert base.coefficients.cpu_small_batch_seq_s == 0.0
    plain = PerfModel(gpu("cpu"), model("tiny-llama"), shape, base)
    extra = 1e-4
    surcharged = PerfModel(gpu("cpu"), model("tiny-llama"), shape,
                           base.with_coefficients(cpu_small_batch_seq_s=extra))
    for seqs, paid in ((1, 1), (3, 3), (4, 4), (5, 4), (16, 4)):
        assert surcharged.step_s(seqs, 100.0 * seqs) - plain.step_s(seqs, 100.0 * seqs) \
            == pytest.approx(paid * extra)
    # a prefill sequence is a sequence of the step, too
    assert surcharged.step_s(1, 100.0, 64, 1, 64 * 32) - plain.step_s(1, 100.0, 64, 1, 64 * 32) \
        == pytest.approx(2 * extra)
    # A run of decode steps in closed form is still exact (the batch is fixed within it).
    (first, end, a, b), = surcharged.decode_segments(2, 200.0, 10)
    assert (first, end) == (0, 10)
    assert a + 9 * b == pytest.approx(surcharged.step_s(2, 200.0 + 2 * 9))
