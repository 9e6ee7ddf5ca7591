"""benchmarks/client_clumping.py's reading of the stand-in server's log (aiperf itself is not a
dependency: the benchmark is run by hand, docs/benchmarks/gpu-fidelity.md)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.client_clumping import clumps


def test_arrivals_are_counted_per_step_slot_after_the_warm_up() -> None:
    step_s = 0.020
    arrived = np.array([0.0005, 0.0010, 0.0210, 0.0250, 0.0260, 0.0410])
    ended = np.array([0.0200, 0.0200, 0.0400])
    sizes, delays = clumps(arrived, ended, step_s, skip=1)
    # slots 0 (one left after the skip), 1 (three), 2 (one)
    assert sizes == {1: 2, 3: 1}
    # each arrival's delay after the latest end before it; the first has none before it
    assert delays == pytest.approx([1.0, 5.0, 6.0, 1.0])
