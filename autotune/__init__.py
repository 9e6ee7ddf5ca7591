"""autotune: finds the vLLM engine arguments with the most capacity under a P99 latency SLO."""

from __future__ import annotations

__version__ = "0.1.0"
