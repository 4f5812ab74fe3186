"""The simulator's timing against real runs: epoch time, time to the first batch, and which steps stall.

Each real run is 1 node x 2 ranks x 1 DataLoader worker (a device batch of 4, one epoch, no shuffle),
reading through a loopback server with a set bandwidth, latency and request-rate limit
(``support.throttle_proxy``); its training step sleeps 0.5 s, and the ranks meet at a barrier every step
as data parallelism makes them (``sim_rank.py``). Times count from the moment the loader's first
iterator is created.

The comparison is held to this machine's own costs, measured in the same run, so a loaded machine
changes both sides alike:

* the step: the simulation is run with the run's mean step cost (from the last rank's batch in hand
  to the step's end: the barrier and the sleep), not the nominal 0.5 s;
* the start-up: the time from the first iterator to the first shard request reaching the server (by
  the monotonic clock every process shares) is taken off the measured times; the simulation does not
  model the workers' start-up;
* a stall: a step stalls when it waits more than a tenth of a step. The simulation's own stalls (1% of
  a step) wait far longer here (600 ms or more), so the coarser line loses none of them, and a loaded
  machine's hand-over of a ready batch (a few ms, now and then tens) does not count as one.

Then the epoch time and the time to the first batch are each within 20% of ``simulate``'s prediction
(and half the start-up: see ``within``), the same steps stall, and the 429 counts are equal. How long each stall waits is printed, not
asserted: on an idle machine the stalls setting's waits are within 5% of the prediction (606 to 638 ms
against 610), but a load average of 15 to 20 on these 2 cores stretched them by up to 45% (the
worker's own work slows with the machine, the simulation's model of it does not), while the epoch
time stayed within 7%.

``throttled`` rests on timing by design: each shard's request must go out before the store admits
another, with 0.25 s (12%) to spare at 0.5 s steps. Where this run's measured steps leave less than 5%
of the interval (steps over 0.534 s: a heavily loaded machine), the 429s and stalls it is built to
show do not happen, so only its epoch time and first batch are compared (``keeps_the_throttle_premise``).

* ``stalls``: 5 shards of 256 KB at 160 KB/s, ``predownload=8`` (two batches): each shard takes longer
  to arrive than its two steps take to train, so every shard's first step waits.
* ``no-stall``: 2 shards of 768 KB at 6 MB/s behind 1.4 s of latency: only the first batch waits. A
  device batch of 8 and 1 s steps (6 steps).
* ``throttled``: 3 shards of 512 KB at 512 KB/s behind 0.5 s of latency, a request every 2.25 s
  (429 beyond; ``index.json`` not counted), ``predownload=4``, ``download_retry=8``: each shard's
  request comes one step after the one before arrived, before the store admits another; it is answered
  429 and sent again once the store admits it (a 429 is throttling, not a failed attempt). Which steps
  stall is compared, not how long: at 22:07 UTC they waited 1.10 and 1.22 s against 1.08 predicted
  (before issue 39's throttling, 0.6 to 1.25 s against 0.68 to 0.74).

Measured at 20:55 UTC (idle machine; less the start-up, 80 to 130 ms), against predicted: stalls 9.19 s,
1.66 s, steps 0, 2, 4, 6, 8 waiting 606 to 638 ms, against 9.13 s, 1.62 s, the same steps at 610 ms;
no-stall 7.60 s, 1.59 s, step 0 against 7.54 s, 1.53 s, step 0; throttled 8.82 s, 1.52 s, steps 0, 4, 8,
two 429s against 9.02 s, 1.50 s, the same steps, two. A throttled setting where a worker waits with
``predownload=8`` and 16-sample shards (its window then spans one shard) is predicted 9.85 s and 11 429s
against 8.3 s and 5 measured: the simulation opens the window ``L`` steps past the trainer while the
worker waits, so its next request goes out beside the one before, and the two back off against each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.sim_runs import Measured, run_real, workload_of, write_dataset
from support.throttle_proxy import Throttle, ThrottleServer, file_kind

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware, Simulation, simulate
from stream_plugin.simulate.calibrate import measure_loader

RANKS, WORKERS, PAYLOAD = 2, 1, 16000
TOLERANCE = 0.2
STALL = 0.1  # a step stalls when it waits more than this fraction of a step, in the run and the simulation


@dataclass(frozen=True)
class Setting:
    samples: int
    per_shard: int
    throttle: Throttle
    dataset: dict[str, Any] = field(default_factory=dict)  # more StreamingDataset arguments
    download_retry: int | None = None
    device_batch: int = 4
    step_time: float = 0.5


SETTINGS = {
    "stalls": Setting(80, 16, Throttle(bandwidth=160e3, latency=0.02), {"predownload": 8}),
    "no-stall": Setting(96, 48, Throttle(bandwidth=6e6, latency=1.4), device_batch=8, step_time=1.0),
    "throttled": Setting(
        96,
        32,
        # burst: a second's requests (at least one), as simulate's store holds
        Throttle(
            bandwidth=512e3, latency=0.5, rate_limit=1 / 2.25, burst=1.0, unlimited=frozenset({"index"})
        ),
        {"predownload": 4},
        download_retry=8,
    ),
}


@dataclass(frozen=True)
class Figures:
    epoch_time: float
    time_to_first_batch: float
    stalled: tuple[int, ...]  # the steps that waited longer than a tenth of a step
    waits: tuple[float, ...]  # those steps' waits
    throttled: int  # requests answered 429
    start_up: float = 0.0  # measured: the run's start-up, taken off its times

    @classmethod
    def measured(cls, run: Measured, start_up: float, threshold: float, throttled: int) -> Figures:
        """The run's figures less the start-up, which the simulation does not model."""
        waits = run.wait - np.where(np.arange(len(run.wait)) == 0, start_up, 0.0)
        stalled = np.flatnonzero(waits > threshold)
        return cls(
            float(run.epoch_times[0]) - start_up,
            run.time_to_first_batch - start_up,
            tuple(stalled.tolist()),
            tuple(waits[stalled].tolist()),
            throttled,
            start_up,
        )

    @classmethod
    def predicted(cls, simulation: Simulation, threshold: float) -> Figures:
        stalled = np.flatnonzero(simulation.wait > threshold)
        return cls(
            simulation.total_time,
            simulation.time_to_first_batch,
            tuple(stalled.tolist()),
            tuple(simulation.wait[stalled].tolist()),
            int(simulation.node_throttled.sum()),
        )


def within(measured: float, predicted: float, start_up: float = 0.0) -> bool:
    """Within 20% of the prediction, and half the start-up more: the first batch's hand-over (reading
    the shard, building and passing the batch) is work of the start-up's kind that the model leaves out,
    and the start-up measures how slow this machine is now (80-130 ms idle, 700 ms at a load of 19)."""
    return abs(measured - predicted) <= TOLERANCE * predicted + start_up / 2


def start_up(run: Measured, server: ThrottleServer) -> float:
    """The machine's start-up cost: from the loader's first iterator to the first shard request reaching
    the server (workers started, index read), by the clock every process shares."""
    shard_requests = [arrival for arrival, _, _, path, _ in server.log if file_kind(path) == "shard"]
    return min(shard_requests) - run.zero


def keeps_the_throttle_premise(setting: Setting, step_cost: float) -> bool:
    """Whether this run's steps were quick enough for a throttled setting's premise: a shard's steps
    (its samples over a global batch) end, and its successor's request goes out, well before the store
    admits another request (5% of the interval to spare). A loaded machine's slower steps let the
    token refill first, and no request meets a 429."""
    assert setting.throttle.rate_limit is not None
    steps_per_shard = setting.per_shard / (setting.device_batch * RANKS)
    return steps_per_shard * step_cost < 0.95 / setting.throttle.rate_limit


def run_setting(setting: Setting, root: Path) -> tuple[Figures, Figures, Measured, Simulation]:
    """Run the setting for real, then simulate it on this machine's costs as the run measured them: its
    step (``step_costs``: the barrier and the compute) and its start-up, taken off the measured times."""
    folder = write_dataset(
        root / "data" / "ds", samples=setting.samples, per_shard=setting.per_shard, payload=PAYLOAD
    )
    dataset = dict(setting.dataset)
    if setting.download_retry is not None:
        dataset["download_retry"] = setting.download_retry
    throttle = setting.throttle
    with ThrottleServer(root / "data", throttle) as server:
        run = run_real(
            server,
            root / "cache",
            nodes=1,
            ranks_per_node=RANKS,
            workers=WORKERS,
            device_batch=setting.device_batch,
            epochs=1,
            step_time=setting.step_time,
            dataset=dataset,
        )
        throttled = server.count("throttled", "node0")
        started = start_up(run, server)
    config = DatasetConfig(batch_size=setting.device_batch, **setting.dataset)
    # The run's clock starts at its first iterator, after the dataset read its index.json: simulate it
    # with the index in hand, as the run starts.
    workload = replace(workload_of(folder, config), index_bytes=())
    if setting.download_retry is not None:
        workload = replace(workload, download_retry=setting.download_retry)
    step_cost = float(np.mean(run.step_costs))
    hardware = Hardware(
        nodes=1,
        devices_per_node=RANKS,
        workers=WORKERS,
        bandwidth=throttle.bandwidth or 1e12,
        latency=throttle.latency,
        rate_limit=throttle.rate_limit,
        step_time=step_cost,
    )
    simulation = simulate(workload, hardware)
    threshold = STALL * step_cost
    measured = Figures.measured(run, started, threshold, throttled)
    return measured, Figures.predicted(simulation, threshold), run, simulation


@pytest.fixture
def loader_costs() -> tuple[float, float]:
    """``(worker_start, handover)`` as ``--calibrate`` measures them on this machine, just before the run
    (a loaded machine changes both alike)."""
    return measure_loader(16 * 1024, 4)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_epoch_time_first_batch_and_the_steps_that_stall_agree_with_the_simulation(
    name: str, tmp_path: Path, loader_costs: tuple[float, float]
) -> None:
    setting = SETTINGS[name]
    measured, predicted, run, simulation = run_setting(setting, tmp_path)
    # With the loader's costs as --calibrate measures them (no start-up taken off the run): the first
    # batch within 20% of the prediction.
    worker_start, handover = loader_costs
    calibrated = simulate(simulation.workload, replace(simulation.hardware, worker_start=worker_start, handover=handover))
    print(
        f"{name}: first batch {run.time_to_first_batch:.3f} s measured from the first iterator, "
        f"{calibrated.time_to_first_batch:.3f} s predicted with worker_start {worker_start:.3f} s and "
        f"handover {handover * 1e3:.1f} ms ({simulation.time_to_first_batch:.3f} s without)"
    )
    assert abs(run.time_to_first_batch - calibrated.time_to_first_batch) <= TOLERANCE * calibrated.time_to_first_batch
    report = (
        f"{name}: measured {measured}, predicted {predicted} (step cost {np.mean(run.step_costs):.3f} s); "
        f"waits (ms) measured {[round(1000 * wait) for wait in run.wait]}, "
        f"predicted {[round(1000 * wait) for wait in simulation.wait]}"
    )
    print(report)
    assert len(run.wait) == simulation.num_steps, report
    assert within(measured.epoch_time, predicted.epoch_time, measured.start_up), report
    assert within(measured.time_to_first_batch, predicted.time_to_first_batch, measured.start_up), report
    if name == "throttled" and not keeps_the_throttle_premise(setting, float(np.mean(run.step_costs))):
        print(f"{name}: steps too slow on this machine now for the 429s to land; steps not compared")
        return
    # A tenth of a step loses none of the simulation's own stalls (1% of a step): they wait far longer.
    assert len(predicted.stalled) == simulation.stalled_steps, report
    assert measured.stalled == predicted.stalled, report
    if name == "throttled":
        assert predicted.throttled > 0 and measured.throttled == predicted.throttled, report
    if name == "no-stall":
        assert predicted.stalled == (0,), "only the first batch should wait in this setting"
    if name == "stalls":
        assert len(predicted.stalled) > 1, "this setting should stall after the first batch"
