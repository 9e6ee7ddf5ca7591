"""GPU telemetry for a trial: an NVML sampler, the tuning guide's memory watermarks, and a null
monitor where NVML is absent (CPU machines, the simulator).

Watermarks (configurable): above `warn` the trial is noted, above `flag` it is flagged, above
`abort` the trial is stopped as memory pressure. They are read against the memory the engine did
not reserve for itself. vLLM takes gpu_memory_utilization x total at start-up by design, so the
GPU's raw used fraction says only what was configured: on an H200, 0.924 with vLLM's default
0.92 and 0.904 with 0.90, so the guide's raw 90% would flag every default engine and its 95%
abort every config above 0.94 (the search space goes to 0.97). The pressure is the share of
the rest in use, (used - reserved) / (1 - reserved): other processes, or an engine outgrowing
its own budget. With nothing reserved it is the raw fraction, as in the guide.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Watermarks:
    warn: float = 0.85
    flag: float = 0.90
    abort: float = 0.95

    def level(self, used_fraction: float) -> str:
        if used_fraction > self.abort:
            return "abort"
        if used_fraction > self.flag:
            return "flag"
        if used_fraction > self.warn:
            return "warn"
        return "ok"


# One sample: per GPU (memory used bytes, memory total bytes, utilisation %).
Sampler = Callable[[], list[tuple[int, int, float]]]


class GpuMonitor:
    """Samples in a background thread between start() and stop(); stop() returns a summary."""

    def __init__(self, sampler: Sampler | None, watermarks: Watermarks = Watermarks(),
                 interval_s: float = 0.5, reserved_fraction: float = 0.0) -> None:
        self.sampler, self.watermarks, self.interval_s = sampler, watermarks, interval_s
        self.reserved_fraction = min(max(reserved_fraction, 0.0), 0.99)
        self.peak_used_fraction = 0.0
        self.peak_pressure = 0.0  # of the memory not reserved, the share in use (see above)
        self.util_sum = 0.0
        self.samples = 0
        self.memory_total_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.sampler is not None

    def sample_once(self) -> None:
        if self.sampler is None:
            return
        gpus = self.sampler()
        if not gpus:
            return
        self.samples += 1
        self.memory_total_bytes = sum(total for _, total, _ in gpus)
        used_fraction = max(used / total for used, total, _ in gpus if total)
        self.peak_used_fraction = max(self.peak_used_fraction, used_fraction)
        free = 1.0 - self.reserved_fraction
        self.peak_pressure = max(self.peak_pressure,
                                 max(0.0, used_fraction - self.reserved_fraction) / free)
        self.util_sum += sum(u for *_, u in gpus) / len(gpus)

    @property
    def level(self) -> str:
        return self.watermarks.level(self.peak_pressure) if self.samples else "ok"

    def start(self) -> None:
        if self.sampler is None or self._thread is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.is_set():
                self.sample_once()
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        return self.summary()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"available": self.available, "samples": 0}
        return {"available": True, "samples": self.samples,
                "memory_total_bytes": self.memory_total_bytes,
                "memory_used_peak_fraction": round(self.peak_used_fraction, 4),
                "memory_reserved_fraction": self.reserved_fraction,
                "memory_pressure_peak": round(self.peak_pressure, 4),
                "utilization_mean_pct": round(self.util_sum / self.samples, 1),
                "watermark": self.level}


def nvml_sampler() -> Sampler | None:
    """An NVML sampler for this process's GPUs (CUDA_VISIBLE_DEVICES), or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:  # no driver, no library, no GPU: the null monitor
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    indices = ([int(x) for x in visible.split(",") if x.strip().isdigit()] if visible
               else list(range(count)))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices if i < count]
    if not handles:
        return None

    def sample() -> list[tuple[int, int, float]]:
        out = []
        for h in handles:
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            out.append((int(mem.used), int(mem.total), float(util.gpu)))
        return out

    return sample


def make_monitor(watermarks: Watermarks = Watermarks(), reserved_fraction: float = 0.0
                 ) -> GpuMonitor:
    return GpuMonitor(nvml_sampler(), watermarks, reserved_fraction=reserved_fraction)
