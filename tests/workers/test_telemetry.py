from __future__ import annotations

import pytest

from autotune.workers.telemetry import GpuMonitor, Watermarks, make_monitor, nvml_sampler


@pytest.mark.parametrize("used, level", [(0.5, "ok"), (0.86, "warn"), (0.91, "flag"),
                                         (0.96, "abort")])
def test_watermarks_follow_the_tuning_guide(used: float, level: str) -> None:
    assert Watermarks().level(used) == level


def test_monitor_summarises_the_worst_gpu() -> None:
    # A scripted sample source: NVML itself needs a GPU (the gpu-marked test covers it).
    samples = iter([[(40, 100, 50.0), (10, 100, 30.0)], [(92, 100, 90.0), (20, 100, 10.0)]])
    monitor = GpuMonitor(lambda: next(samples))
    monitor.sample_once()
    monitor.sample_once()
    s = monitor.summary()
    assert s["memory_used_peak_fraction"] == 0.92 and s["watermark"] == "flag"
    assert s["utilization_mean_pct"] == pytest.approx((40 + 50) / 2)
    assert s["memory_total_bytes"] == 200


@pytest.mark.parametrize("used, level", [(0.924, "ok"), (0.99, "warn"), (0.9945, "flag"),
                                         (0.997, "abort")])
def test_watermarks_read_the_memory_the_engine_did_not_reserve(used: float, level: str) -> None:
    # vLLM takes gpu_memory_utilization (0.92) of the card up front; on an H200 the card then
    # read 0.924 used. Only what goes beyond that into the remaining 8% is pressure.
    monitor = GpuMonitor(lambda: [(int(used * 10_000), 10_000, 0.0)], reserved_fraction=0.92)
    monitor.sample_once()
    assert monitor.level == level
    s = monitor.summary()
    assert s["memory_used_peak_fraction"] == pytest.approx(used)
    assert s["memory_pressure_peak"] == pytest.approx((used - 0.92) / 0.08, abs=1e-4)


def test_null_monitor_without_nvml() -> None:
    if nvml_sampler() is not None:
        pytest.skip("this machine has NVML")
    monitor = make_monitor()
    monitor.start()
    assert monitor.stop() == {"available": False, "samples": 0}
    assert monitor.level == "ok"


@pytest.mark.gpu
def test_nvml_samples_a_real_gpu() -> None:
    sampler = nvml_sampler()
    if sampler is None:
        pytest.skip("no NVIDIA GPU here")
    gpus = sampler()
    assert gpus and all(0 < used <= total for used, total, _ in gpus)
