"""``stream-plugin simulate``: the run's stalls, egress and cache needs before the cluster is rented.

It runs the real sample order (``order``, through ``reading.epochs.EpochPlanner``) and the real
eviction rules (``cache``) over a model of the hardware: node bandwidth, request latency, a request
rate limit answered with 429s, decompression, per-sample read time and the training step.
"""

from stream_plugin.simulate.engine import simulate
from stream_plugin.simulate.model import EpochShuffle, Hardware, Simulation, Workload

__all__ = ["EpochShuffle", "Hardware", "Simulation", "Workload", "simulate"]
