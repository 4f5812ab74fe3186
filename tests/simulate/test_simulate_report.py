"""What ``stream-plugin simulate`` shows of a ``Simulation``: the table, the JSON and the report folder,
on simulations written by hand (so every figure shown is known)."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import EpochShuffle, Hardware, Simulation, Workload, simulate
from stream_plugin.simulate.report import (
    format_seconds,
    format_table,
    format_tuning,
    render_html,
    request_rates,
    summary,
    write_report,
)
from stream_plugin.simulate.tune import Candidate, Setting, TuneResult

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(
    not HAS_MATPLOTLIB, reason="the PNG plots need matplotlib (pip install 'stream-plugin[simulate]')"
)
GIB = 1 << 30


def fake_simulation(nodes: int = 2, steps: int = 4, cache_limit: int | None = None) -> Simulation:
    """``steps`` steps of 1 s of 32 samples over two epochs; the second step waits 0.5 s."""
    workload = Workload.synthetic(
        shards=10,
        samples_per_shard=100,
        raw_bytes_per_shard=GIB,
        config=DatasetConfig(batch_size=4, cache_limit=cache_limit),
    )
    wait = np.zeros(steps)
    wait[1] = 0.5
    ends = np.cumsum(1.0 + wait)  # each step: its wait, then 1 s of compute
    return Simulation(
        workload=workload,
        hardware=Hardware(nodes=nodes, devices_per_node=4, workers=2, step_time=1.0),
        step_start=ends - 1.0,
        step_end=ends,
        wait=wait,
        epoch_of_step=np.repeat([0, 1], [steps // 2, steps - steps // 2]),
        samples_per_step=np.full(steps, 32),
        node_requests=np.arange(nodes) + 5,
        node_throttled=np.full(nodes, 1),
        node_bytes=np.full(nodes, 5 * GIB),
        node_downloads=np.arange(nodes) + 5,
        node_peak_cache=np.full(nodes, 3 * GIB),
        download_once_cache_limit=2 * GIB,
        shuffle=(EpochShuffle(0.9, 0.8, 3.5), EpochShuffle(0.7, 0.6, 2.5)),
        notes=("a note for the reader",),
    )


def test_the_table_shows_the_run_its_egress_cache_nodes_and_shuffle() -> None:
    table = format_table(fake_simulation(), price_per_gb=0.09)
    assert "simulated: 4 steps, 2 epoch(s), 2 node(s) x 4 device(s) x 2 worker(s)" in table
    assert re.search(r"stalled steps +1 of 4 \(waited 500.0 ms in all\)", table)
    assert re.search(r"time to first batch +0 s\n", table)
    assert "10.0 GiB in 11 requests (2 answered 429), $0.97 at $0.09/GB" in table  # 10 * 2**30 bytes
    assert "peak 3.0 GiB on a node; cache_limit unset; smallest without extra egress 2.0 GiB" in table
    assert re.search(r"\n  1 +6 +1 +6 +5.0 GiB +3.0 GiB\n", table)
    assert re.search(r"\n  1 +0.700 +0.600 +2.5\n", table)
    assert "  - a note for the reader" in table


def test_the_table_shows_min_median_max_of_many_nodes() -> None:
    table = format_table(fake_simulation(nodes=40))
    assert re.search(r"\n  min +5 ", table) and re.search(r"\n  max +44 ", table)
    assert "\n  39 " not in table
    assert "(40 answered 429), cost: pass --egress-price-per-gb" in table


def test_the_json_is_the_simulations_summary_with_the_inputs_and_per_step_spread() -> None:
    simulation = fake_simulation()
    figures = json.loads(json.dumps(summary(simulation, price_per_gb=0.09)))
    # Golden values, worked out by hand from fake_simulation: steps end at 1, 2.5, 3.5 and 4.5 s, 128
    # samples in all, 10 GiB (10.737 GB) over two nodes of 5 and 6 requests.
    golden = {
        "steps": 4,
        "total_time_s": 4.5,
        "time_to_first_batch_s": 0.0,
        "stalled_steps": 1,
        "total_wait_s": 0.5,
        "mean_throughput_samples_per_s": pytest.approx(128 / 4.5),
        "egress_bytes": 10 * GIB,
        "egress_cost": pytest.approx(10 * GIB / 1e9 * 0.09),
        "requests": 11,
        "throttled_requests": 2,
        "index_bytes_per_node": 0,  # a synthetic shape's workload without an index
        "nodes": [
            {"node": 0, "requests": 5, "throttled": 1, "bytes": 5 * GIB, "downloads": 5, "peak_cache_bytes": 3 * GIB},
            {"node": 1, "requests": 6, "throttled": 1, "bytes": 5 * GIB, "downloads": 6, "peak_cache_bytes": 3 * GIB},
        ],
        "download_once_cache_limit_bytes": 2 * GIB,
        "shuffle": [
            {"epoch": 0, "spread_median": 0.9, "spread_mean": 0.8, "shards_per_batch": 3.5},
            {"epoch": 1, "spread_median": 0.7, "spread_mean": 0.6, "shards_per_batch": 2.5},
        ],
        "notes": ["a note for the reader"],
    }
    assert set(simulation.summary(0.09)) == set(golden)
    assert {key: figures[key] for key in golden} == golden
    assert figures["inputs"]["hardware"]["nodes"] == 2
    assert figures["inputs"]["dataset"]["batch_size"] == 4
    assert figures["inputs"]["data"] == {
        "streams": 1,
        "shards": 10,
        "samples": 1000,
        "stored_bytes": 10 * GIB,
        "raw_bytes": 10 * GIB,
    }
    assert figures["wait_per_step_s"]["max"] == 0.5
    assert figures["throughput_per_step_samples_per_s"]["p50"] == 32.0
    assert figures["epochs"] == 2


def test_the_page_holds_its_images_as_data_uris_and_loads_nothing_else() -> None:
    images = {"throughput.png": b"\x89PNG fake one", "cache.png": b"\x89PNG fake two"}
    page = render_html(fake_simulation(), images, price_per_gb=0.09)
    for data in images.values():
        assert f'src="data:image/png;base64,{base64.b64encode(data).decode()}"' in page
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []
    assert "<script" not in page
    assert "$0.97 at $0.09/GB" in page and "a note for the reader" in page


def test_the_page_escapes_text() -> None:
    simulation = fake_simulation()
    noted = Simulation(**{**simulation.__dict__, "notes": ("<b>&</b>",)})
    assert "&lt;b&gt;&amp;&lt;/b&gt;" in render_html(noted, {})


@needs_matplotlib
def test_write_report_writes_the_plots_a_summary_and_one_self_contained_page(tmp_path: Path) -> None:
    page = write_report(fake_simulation(cache_limit=4 * GIB), tmp_path / "report", price_per_gb=0.09)
    pngs = sorted(path.name for path in page.parent.glob("*.png"))
    assert pngs == ["cache.png", "egress.png", "throughput.png", "wait.png"]
    html = page.read_text()
    for name in pngs:
        data = (page.parent / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert base64.b64encode(data).decode() in html
    steps = (page.parent / "steps.csv").read_text().splitlines()
    assert steps[0] == "step,epoch,start_s,end_s,wait_s,samples,samples_per_s"
    assert steps[2] == "1,0,1.500000,2.500000,0.500000,32,21.333"
    assert len(steps) == 1 + 4
    assert json.loads((page.parent / "summary.json").read_text())["egress_cost"] == pytest.approx(
        10 * GIB / 1e9 * 0.09
    )


@needs_matplotlib
def test_the_plots_of_a_long_run_are_binned(tmp_path: Path) -> None:
    page = write_report(fake_simulation(steps=50_000), tmp_path)
    assert (page.parent / "throughput.png").stat().st_size > 0


def test_durations_read_in_their_own_units() -> None:
    assert [format_seconds(value) for value in (0, 0.00085, 0.0123, 4.561, 192, 7500)] == [
        "0 s",
        "850 us",
        "12.3 ms",
        "4.56 s",
        "3m 12s",
        "2h 05m",
    ]


def test_the_tuning_ranking_lists_settings_best_first() -> None:
    fast, slow = fake_simulation(), fake_simulation(steps=6)
    result = TuneResult(
        candidates=(
            Candidate(Setting(8, 2, None, None), fast, True, 0.97),
            Candidate(Setting(32, 4, 2 * GIB, 1000), slow, False, 0.97),
        ),
        refused=((Setting(8, 1, 1, None), "cache_limit: too small"),),
        target_throughput=None,
        price_per_gb=0.09,
    )
    text = format_tuning(result)
    assert text.startswith("tuned: 2 settings simulated, 1 reach no stalled step after the first batch\n")
    assert re.search(r"\n  1 +yes +8 +2 +unset +default +", text)
    assert re.search(r"\n  2 +no +32 +4 +2.0 GiB +1,000 +", text)
    assert "cache_limit: too small" in text


def rated_simulation() -> Simulation:
    """``fake_simulation`` whose store saw requests at known times: node 0 at 0.1, 0.2 (refused), 0.9
    and 2.5 s; node 1 at 0.5 and 2.0 s (refused)."""
    simulation = fake_simulation()
    return Simulation(
        **{
            **simulation.__dict__,
            "request_times": np.array([0.1, 0.2, 0.5, 0.9, 2.0, 2.5]),
            "request_nodes": np.array([0, 0, 1, 0, 1, 0]),
            "request_refused": np.array([False, True, False, False, True, False]),
        }
    )


def test_the_request_rates_count_the_requests_the_store_saw_each_second() -> None:
    rates = request_rates(rated_simulation())
    assert rates["bin_s"] == 1.0
    assert rates["requests_per_s"] == [4.0, 0.0, 2.0]
    assert rates["refused_per_s"] == [1.0, 0.0, 1.0]
    assert rates["per_node"][0] == {"requests_per_s": [3.0, 0.0, 1.0], "refused_per_s": [1.0, 0.0, 0.0]}
    assert rates["per_node"][1] == {"requests_per_s": [1.0, 0.0, 1.0], "refused_per_s": [0.0, 0.0, 1.0]}
    assert (rates["peak_requests_per_s"], rates["peak_refused_per_s"]) == (4.0, 1.0)
    assert rates["peak_node_requests_per_s"] == [3.0, 1.0]
    assert summary(rated_simulation())["request_rate"] == rates
    table = format_table(rated_simulation())
    assert re.search(r"\n  job +4 +1 +0-1 s\n  node 0 +3\n  node 1 +1\n", table)


def test_a_simulated_throttled_run_reports_every_request_and_429_it_made() -> None:
    work = Workload.synthetic(
        shards=64, samples_per_shard=32, raw_bytes_per_shard=1 << 20, config=DatasetConfig(batch_size=4)
    )
    hardware = Hardware(nodes=3, devices_per_node=2, workers=2, latency=0.01, rate_limit=20, step_time=0.01)
    simulation = simulate(work, hardware)
    rates = request_rates(simulation)
    sent = simulation.node_requests + simulation.node_throttled  # admitted, and each 429
    assert simulation.node_throttled.sum() > 0
    assert sum(rates["requests_per_s"]) * rates["bin_s"] == sent.sum()
    assert sum(rates["refused_per_s"]) * rates["bin_s"] == simulation.node_throttled.sum()
    for node in range(3):
        assert sum(rates["per_node"][node]["requests_per_s"]) == sent[node]
        assert sum(rates["per_node"][node]["refused_per_s"]) == simulation.node_throttled[node]
    # The store admits 20 a second (a bucket of 20 at the start): what it let through never beats that.
    admitted = np.array(rates["requests_per_s"]) - np.array(rates["refused_per_s"])
    assert admitted[0] <= 2 * 20 and np.all(admitted[1:] <= 20 + 1)


def test_many_nodes_report_the_spread_of_their_rates() -> None:
    simulation = rated_simulation()
    many = Simulation(
        **{
            **simulation.__dict__,
            "hardware": replace(simulation.hardware, nodes=20),
            "node_requests": np.full(20, 1),
            "request_nodes": np.array([0, 0, 1, 0, 19, 0]),
        }
    )
    rates = request_rates(many)
    assert "per_node" not in rates
    assert rates["nodes_per_s"]["max"] == [3.0, 0.0, 1.0]
    assert rates["nodes_per_s"]["min"] == [0.0, 0.0, 0.0]


@needs_matplotlib
def test_the_report_plots_the_request_rates_when_the_store_saw_requests(tmp_path: Path) -> None:
    page = write_report(rated_simulation(), tmp_path)
    assert (page.parent / "requests.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert json.loads((page.parent / "summary.json").read_text())["request_rate"]["requests_per_s"] == [4, 0, 2]
