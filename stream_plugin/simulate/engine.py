"""The simulation itself (being written by the lead): ``simulate(workload, hardware) -> Simulation``."""

from __future__ import annotations

from stream_plugin.simulate.model import Hardware, Simulation, Workload


def simulate(workload: Workload, hardware: Hardware) -> Simulation:
    raise NotImplementedError("the engine lands in the next commit")


__all__ = ["simulate"]
