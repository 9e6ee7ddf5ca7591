"""The simulator's offline tools reach a front end through the backend's entry point."""

from __future__ import annotations

from autotune.measure.backends import backend_class
from autotune.measure.sim_tools import SimulatorTools, simulator_tools
from autotune.workers.sim import tools


def test_the_sim_backend_hands_over_its_offline_tools() -> None:
    assert simulator_tools() is tools is backend_class("sim").tools
    assert isinstance(tools, SimulatorTools)
