"""What ``stream-plugin simulate`` shows: a table on the terminal, JSON, and a folder of plots with one
self-contained HTML page (``write_report``: the PNGs embedded as base64 data URIs, so the page opens
from disk and can be mailed as one file).

The plots need matplotlib (``pip install 'stream-plugin[simulate]'``); the table, the JSON and the page
itself do not.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.simulate.model import Simulation
from stream_plugin.simulate.tune import StartUp, TuneResult
from stream_plugin.units import format_bytes

# Per-node rows shown in full up to this many nodes; above it, the table shows min / median / max.
_NODE_ROWS = 16
# Steps drawn one by one up to this many; above it each point is the mean of a bin of steps.
_PLOT_POINTS = 2000
_PERCENTILES = (5, 50, 95)


def format_seconds(seconds: float) -> str:
    """``seconds`` for people: ``850 us``, ``12.3 ms``, ``4.56 s``, ``3m 12s``, ``2h 05m``."""
    if seconds == 0:
        return "0 s"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _distribution(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {"min": 0.0, "max": 0.0, **{f"p{p}": 0.0 for p in _PERCENTILES}}
    points = np.percentile(values, _PERCENTILES)
    return {
        "min": float(values.min()),
        **{f"p{p}": float(point) for p, point in zip(_PERCENTILES, points)},
        "max": float(values.max()),
    }


def _plain(value: Any) -> Any:
    """Dataclasses, numpy scalars and tuples as JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def rate_bin(simulation: Simulation) -> float:
    """Seconds per bin of the request rates: one second, wider for a run of over ``_PLOT_POINTS``
    seconds (whole seconds, at most ``_PLOT_POINTS`` bins)."""
    span = float(simulation.request_times.max()) if len(simulation.request_times) else 0.0
    return float(max(1, int(np.ceil(span / _PLOT_POINTS))))


def request_rates(simulation: Simulation) -> dict[str, Any]:
    """Requests the store saw per second over time, and the ones it refused (429), in total and per
    node: counts of ``Simulation.request_times`` in bins of ``rate_bin`` seconds, over the bin width.

    ``per_node`` holds each node's series up to ``_NODE_ROWS`` nodes; above it, ``nodes_per_s`` holds
    the min, median and max over the nodes of each bin."""
    width = rate_bin(simulation)
    times, nodes, refused = simulation.request_times, simulation.request_nodes, simulation.request_refused
    count = len(simulation.node_requests)
    bins = int(np.floor(times.max() / width)) + 1 if len(times) else 0
    slot = np.floor(times / width).astype(np.int64)  # (R,): each request's bin
    per_node = np.zeros((count, bins), np.int64)  # (N, bins)
    np.add.at(per_node, (nodes, slot), 1)
    refused_per_bin = np.bincount(slot[refused], minlength=bins)  # (bins,)
    total = per_node.sum(axis=0)  # (bins,)
    node_peaks = per_node.max(axis=1) / width if bins else np.zeros(count)  # (N,)
    figures: dict[str, Any] = {
        "bin_s": width,
        "requests_per_s": (total / width).tolist(),
        "refused_per_s": (refused_per_bin / width).tolist(),
        "peak_requests_per_s": float(total.max() / width) if bins else 0.0,
        "peak_refused_per_s": float(refused_per_bin.max() / width) if bins else 0.0,
        "peak_node_requests_per_s": node_peaks.tolist(),
    }
    if count <= _NODE_ROWS:
        figures["per_node"] = [
            {
                "requests_per_s": (per_node[node] / width).tolist(),
                "refused_per_s": (np.bincount(slot[refused & (nodes == node)], minlength=bins) / width).tolist(),
            }
            for node in range(count)
        ]
    else:
        figures["nodes_per_s"] = {
            label: (pick(per_node, axis=0) / width).tolist() if bins else []
            for label, pick in (("min", np.min), ("median", np.median), ("max", np.max))
        }
    return figures


def inputs(simulation: Simulation) -> dict[str, Any]:
    """What was simulated: the hardware, the data's shape and the dataset's settings."""
    workload = simulation.workload
    return {
        "hardware": _plain(simulation.hardware),
        "data": {
            "streams": len(workload.shards_per_stream),
            "shards": workload.num_shards,
            "samples": workload.num_samples,
            "stored_bytes": int(workload.stored_bytes.sum()),
            "raw_bytes": int(workload.raw_bytes.sum()),
        },
        "dataset": _plain(workload.config),
    }


def summary(simulation: Simulation, *, price_per_gb: float = 0.0) -> dict[str, Any]:
    """``Simulation.summary`` with the inputs and the spread of the per-step figures: what ``--json`` prints."""
    return {
        **simulation.summary(price_per_gb),
        "egress_price_per_gb": price_per_gb,
        "throughput_per_step_samples_per_s": _distribution(simulation.throughput),
        "wait_per_step_s": _distribution(simulation.wait),
        "epochs": int(simulation.epoch_of_step.max()) + 1 if simulation.num_steps else 0,
        "request_rate": request_rates(simulation),
        "inputs": inputs(simulation),
    }


def to_json(simulation: Simulation, *, price_per_gb: float = 0.0) -> str:
    return json.dumps(summary(simulation, price_per_gb=price_per_gb), indent=2)


# ---------------------------------------------------------------------------------------- the table
def _aligned(rows: Sequence[Sequence[str]], indent: str = "  ", *, numbers: bool = True) -> list[str]:
    """Rows of cells: the first column left-aligned, the others right-aligned (left too unless ``numbers``)."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        indent
        + "  ".join(
            cell.ljust(width) if column == 0 or not numbers else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]


def _node_rows(figures: Mapping[str, Any]) -> list[list[str]]:
    nodes = figures["nodes"]
    columns: list[tuple[str, Callable[[int], str]]] = [
        ("requests", lambda value: f"{value:,}"),
        ("throttled", lambda value: f"{value:,}"),
        ("downloads", lambda value: f"{value:,}"),
        ("bytes", format_bytes),
        ("peak_cache_bytes", format_bytes),
    ]
    header = ["node", "requests", "throttled (429)", "downloads", "egress", "peak cache"]
    if len(nodes) <= _NODE_ROWS:
        body = [[str(node["node"]), *(show(node[key]) for key, show in columns)] for node in nodes]
    else:
        body = []
        for label, pick in (("min", np.min), ("median", np.median), ("max", np.max)):
            body.append([label, *(show(int(pick([node[key] for node in nodes]))) for key, show in columns)])
    return [header, *body]


def _rate_lines(rates: Mapping[str, Any], nodes: int) -> list[str]:
    """The request rates' section of the table: the job's peak and each node's (none without requests)."""
    if not rates["requests_per_s"]:
        return []
    width = rates["bin_s"]
    peaks = rates["peak_node_requests_per_s"]
    busiest = int(np.argmax(rates["requests_per_s"]))
    rows = [
        ["job", f"{rates['peak_requests_per_s']:,.0f}", f"{rates['peak_refused_per_s']:,.0f}",
         f"{busiest * width:g}-{(busiest + 1) * width:g} s"],
    ]  # fmt: skip
    if nodes <= _NODE_ROWS:
        rows += [[f"node {node}", f"{peak:,.0f}", "", ""] for node, peak in enumerate(peaks)]
    else:
        rows += [
            [f"node ({label})", f"{float(pick(peaks)):,.0f}", "", ""]
            for label, pick in (("min", np.min), ("median", np.median), ("max", np.max))
        ]
    return [
        "",
        f"requests to the store per second (in {width:g} s bins; --report plots them over time):",
        *_aligned([["", "peak requests/s", "refused (429)/s", "busiest"], *rows]),
    ]


def format_table(simulation: Simulation, *, price_per_gb: float = 0.0) -> str:
    """The run's figures as aligned plain text, for the terminal."""
    figures = summary(simulation, price_per_gb=price_per_gb)
    hw = simulation.hardware
    throughput = figures["throughput_per_step_samples_per_s"]
    steps = figures["steps"]
    cache_limit = simulation.workload.config.cache_limit
    lines = [
        f"simulated: {steps:,} steps, {figures['epochs']} epoch(s), {hw.nodes} node(s) x "
        f"{hw.devices_per_node} device(s) x {hw.workers} worker(s)",
        *_aligned(
            [
                ["total time", format_seconds(figures["total_time_s"])],
                ["time to first batch", format_seconds(figures["time_to_first_batch_s"])],
                [
                    "stalled steps",
                    f"{figures['stalled_steps']:,} of {steps:,} (waited {format_seconds(figures['total_wait_s'])} in all)",
                ],
                [
                    "throughput",
                    f"{figures['mean_throughput_samples_per_s']:,.1f} samples/s overall; per step "
                    f"p5 {throughput['p5']:,.1f}, median {throughput['p50']:,.1f}, p95 {throughput['p95']:,.1f}",
                ],
                [
                    "egress",
                    f"{format_bytes(figures['egress_bytes'])} in {figures['requests']:,} requests "
                    f"({figures['throttled_requests']:,} answered 429), "
                    + (
                        f"${figures['egress_cost']:,.2f} at ${price_per_gb:g}/GB"
                        if price_per_gb
                        else "cost: pass --egress-price-per-gb"
                    ),
                ],
                [
                    "cache",
                    f"peak {format_bytes(max(node['peak_cache_bytes'] for node in figures['nodes']))} on a node; "
                    f"cache_limit {'unset' if cache_limit is None else format_bytes(cache_limit)}; smallest "
                    f"without extra egress {format_bytes(figures['download_once_cache_limit_bytes'])}",
                ],
            ],
            numbers=False,
        ),
        "",
        "per node:",
        *_aligned(_node_rows(figures)),
        *_rate_lines(figures["request_rate"], len(figures["nodes"])),
        "",
        "shuffle quality:",
        *_aligned(
            [
                ["epoch", "shard spread (median)", "(mean)", "shards per global batch"],
                *(
                    [
                        str(epoch["epoch"]),
                        f"{epoch['spread_median']:.3f}",
                        f"{epoch['spread_mean']:.3f}",
                        f"{epoch['shards_per_batch']:.1f}",
                    ]
                    for epoch in figures["shuffle"]
                ),
            ]
        ),
    ]
    if figures["notes"]:
        lines += ["", "notes:", *(f"  - {note}" for note in figures["notes"])]
    return "\n".join(lines) + "\n"


def format_tuning(result: TuneResult, *, shown: int = 10) -> str:
    """``--tune``'s ranking (best first; ``tune``'s order) as aligned plain text."""
    rows = [["rank", "qualifies", "predownload", "workers", "cache_limit", "shuffle_block_size"]]
    rows[0] += ["total time", "stalls after the first batch", "egress", "cost", "peak cache"]
    for rank, candidate in enumerate(result.candidates[:shown], start=1):
        setting, simulation = candidate.setting, candidate.simulation
        rows.append(
            [
                str(rank),
                "yes" if candidate.qualifies else "no",
                str(setting.predownload),
                str(setting.num_workers),
                "unset" if setting.cache_limit is None else format_bytes(setting.cache_limit),
                "default" if setting.shuffle_block_size is None else f"{setting.shuffle_block_size:,}",
                format_seconds(simulation.total_time),
                f"{simulation.stalls_after_first_batch:,}",
                format_bytes(simulation.egress_bytes),
                f"${candidate.cost:,.2f}",
                format_bytes(int(simulation.node_peak_cache.max()) if len(simulation.node_peak_cache) else 0),
            ]
        )
    goal = (
        "no stalled step after the first batch"
        if result.target_throughput is None
        else f"at least {result.target_throughput:,.1f} samples/s"
    )
    lines = [
        f"tuned: {len(result.candidates)} settings simulated, "
        f"{sum(candidate.qualifies for candidate in result.candidates)} reach {goal}",
        *_aligned(rows),
    ]
    if len(result.candidates) > shown:
        lines.append(f"  ... {len(result.candidates) - shown} more (--json lists the best and runners-up)")
    if result.refused:
        lines += ["", "refused by the simulation:"]
        lines += [f"  - {setting.to_dict()}: {reason}" for setting, reason in result.refused]
    if result.best is None:
        lines += ["", f"no setting reaches {goal}: add nodes or bandwidth, or lower the target"]
    return "\n".join(lines) + "\n"


def format_start_up(found: Sequence[StartUp], target: float, *, shown: int = 10) -> str:
    """``--tune --target-first-batch``'s ranking (``tune.tune_start_up``'s order) as aligned text."""
    rows = [["rank", "within", "start_stagger", "first_shards", "first batch", "requests", "429s"]]
    for rank, candidate in enumerate(found[:shown], start=1):
        sim = candidate.simulation
        rows.append(
            [
                str(rank),
                "yes" if candidate.qualifies else "no",
                format_seconds(candidate.start_stagger),
                "all" if candidate.first_shards is None else str(candidate.first_shards),
                format_seconds(sim.time_to_first_batch),
                f"{sim.requests:,}",
                f"{int(sim.node_throttled.sum()):,}",
            ]
        )
    lines = [
        f"start-up: {len(found)} settings simulated to the first batch, "
        f"{sum(candidate.qualifies for candidate in found)} within {format_seconds(target)}",
        *_aligned(rows),
    ]
    limit = found[0].simulation.hardware.rate_limit if found else None
    if limit:
        needed = found[0].simulation.requests  # every request before the first batch: index and first shards
        lines += [
            "",
            f"the store's {limit:,.0f} requests/s (a second's burst first) alone take "
            f"{format_seconds(max(0.0, needed - limit) / limit)} for the {needed:,} requests before the first batch",
        ]
    lines += [
        "",
        "start_stagger and first_shards are dataset options "
        "(StreamingDataset(start_stagger=..., first_shards=...))",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- plots
def _binned(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, mean, min)`` of ``values`` in at most ``_PLOT_POINTS`` bins of consecutive steps."""
    steps = len(values)
    if steps <= _PLOT_POINTS:
        return np.arange(steps), values, values
    edges = np.linspace(0, steps, _PLOT_POINTS + 1).astype(np.int64)
    starts = edges[:-1]  # (bins,)
    means = np.add.reduceat(values, starts) / np.diff(edges)
    return starts, means, np.minimum.reduceat(values, starts)


def require_plotting() -> None:
    """Raise ``MissingDependencyError`` naming the ``simulate`` extra when matplotlib is missing."""
    from stream_plugin.extras import require_extra

    require_extra("matplotlib", extra="simulate", needed_by="stream-plugin simulate --report (its plots)")


def plots(simulation: Simulation) -> dict[str, bytes]:
    """The report's figures as PNG bytes, by file name (needs matplotlib)."""
    require_plotting()
    images = {
        "throughput.png": _png(_plot_throughput, simulation),
        "wait.png": _png(_plot_wait, simulation),
        "egress.png": _png(_plot_egress, simulation),
        "cache.png": _png(_plot_cache, simulation),
    }
    if len(simulation.request_times):
        images["requests.png"] = _png(_plot_requests, simulation)
    return images


def _png(draw: Callable[[Any, Simulation], None], simulation: Simulation) -> bytes:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.2), dpi=100, layout="constrained")
    draw(figure.add_subplot(), simulation)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _epoch_lines(axes: Any, simulation: Simulation) -> None:
    starts = np.flatnonzero(np.diff(simulation.epoch_of_step)) + 1
    for start in starts:
        axes.axvline(start, color="grey", linestyle=":", linewidth=1)


def _plot_throughput(axes: Any, simulation: Simulation) -> None:
    steps, mean, low = _binned(simulation.throughput)
    axes.plot(steps, mean, linewidth=1, label="samples/s")
    if len(steps) < simulation.num_steps:
        axes.fill_between(steps, low, mean, alpha=0.3, label="slowest step of each bin")
    hw = simulation.hardware
    compute = hw.step_time + hw.step_time_per_sample * (simulation.workload.config.batch_size or 1)
    if compute > 0 and simulation.num_steps:
        axes.axhline(
            float(simulation.samples_per_step.max()) / compute,
            color="black",
            linestyle="--",
            linewidth=1,
            label="compute bound",
        )
    _epoch_lines(axes, simulation)
    axes.set(title="Throughput per step", xlabel="step", ylabel="samples per second")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower right", fontsize="small")


def _plot_wait(axes: Any, simulation: Simulation) -> None:
    steps, mean, _ = _binned(simulation.wait)
    axes.plot(steps, mean, linewidth=1, color="tab:red", label="wait per step (s)")
    axes.set(title="Time each step waited for data", xlabel="step", ylabel="seconds")
    _epoch_lines(axes, simulation)
    total = axes.twinx()
    total.plot(np.arange(simulation.num_steps), np.cumsum(simulation.wait), color="tab:grey", linewidth=1)
    total.set_ylabel("total wait (s)", color="tab:grey")
    total.set_ylim(bottom=0)


def _node_axis(axes: Any, nodes: np.ndarray, heights: np.ndarray) -> None:
    """Whole node numbers on the x axis, and room above the bars for the legend and labels."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylim(0, max(float(heights.max()) if len(heights) else 0.0, 1e-9) * 1.3)


def _plot_egress(axes: Any, simulation: Simulation) -> None:
    nodes = np.arange(len(simulation.node_bytes))
    _node_axis(
        axes,
        nodes,
        np.append(simulation.node_bytes, simulation.workload.stored_bytes.sum() / max(len(nodes), 1)) / 2**30,
    )
    axes.bar(nodes, simulation.node_bytes / 2**30, color="tab:blue")
    axes.set(title="Egress per node", xlabel="node", ylabel="GiB downloaded")
    share = float(simulation.workload.stored_bytes.sum()) / len(nodes) / 2**30 if len(nodes) else 0.0
    axes.axhline(share, color="black", linestyle="--", linewidth=1, label="the dataset / nodes")
    axes.legend(loc="upper right", fontsize="small")
    for node, (size, requests) in enumerate(zip(simulation.node_bytes, simulation.node_requests)):
        if len(nodes) <= _NODE_ROWS:
            axes.annotate(
                f"{int(requests):,} req", (node, size / 2**30), ha="center", va="bottom", fontsize="small"
            )


def _plot_requests(axes: Any, simulation: Simulation) -> None:
    rates = request_rates(simulation)
    width = rates["bin_s"]
    starts = np.arange(len(rates["requests_per_s"])) * width
    axes.step(starts, rates["requests_per_s"], where="post", linewidth=1.2, color="tab:blue", label="job")
    if "per_node" in rates and len(rates["per_node"]) > 1:
        for node, series in enumerate(rates["per_node"]):
            axes.step(starts, series["requests_per_s"], where="post", linewidth=0.6, alpha=0.6,
                      label=f"node {node}" if node < 4 else None)  # fmt: skip
    elif "nodes_per_s" in rates:
        axes.step(starts, rates["nodes_per_s"]["max"], where="post", linewidth=0.8, color="tab:grey",
                  label="busiest node")  # fmt: skip
    if any(rates["refused_per_s"]):
        axes.step(starts, rates["refused_per_s"], where="post", linewidth=1.2, color="tab:red", label="refused (429)")
    limit = simulation.hardware.rate_limit
    if limit is not None:
        axes.axhline(limit, color="black", linestyle="--", linewidth=1, label="rate limit")
    axes.set(title="Requests to the store per second", xlabel="seconds", ylabel="requests per second")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper right", fontsize="small")


def _plot_cache(axes: Any, simulation: Simulation) -> None:
    nodes = np.arange(len(simulation.node_peak_cache))
    axes.bar(nodes, simulation.node_peak_cache / 2**30, color="tab:green", label="peak occupancy")
    axes.axhline(
        simulation.download_once_cache_limit / 2**30,
        color="black",
        linestyle="--",
        label="smallest limit, no extra egress",
    )
    limit = simulation.workload.config.cache_limit
    if limit is not None:
        axes.axhline(limit / 2**30, color="tab:red", linestyle=":", label="cache_limit")
    axes.set(title="Cache per node", xlabel="node", ylabel="GiB")
    tallest = max(simulation.node_peak_cache.max(initial=0), simulation.download_once_cache_limit, limit or 0)
    _node_axis(axes, nodes, np.array([tallest / 2**30]))
    axes.legend(loc="upper right", fontsize="small", ncols=3)


# ---------------------------------------------------------------------------------------- the page
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
"""


def _html_table(rows: Sequence[Sequence[str]]) -> str:
    head, *body = rows
    header = "".join(f"<th>{html.escape(cell)}</th>" for cell in head)
    lines = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in body
    )
    return f"<table><tr>{header}</tr>{lines}</table>"


def render_html(simulation: Simulation, images: Mapping[str, bytes], *, price_per_gb: float = 0.0) -> str:
    """The report page: the figures, the plots as ``data:`` URIs and the inputs; nothing outside it."""
    figures = summary(simulation, price_per_gb=price_per_gb)
    pictures = "".join(
        f"<h2>{html.escape(name.removesuffix('.png').capitalize())}</h2>"
        f'<img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'
        for name, data in images.items()
    )
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in figures["notes"])
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>stream-plugin simulate</title><style>{_STYLE}</style></head><body>"
        "<h1>stream-plugin simulate</h1>"
        f"<pre>{html.escape(format_table(simulation, price_per_gb=price_per_gb))}</pre>"
        f"{pictures}" + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "") + "<h2>Inputs</h2>"
        f"<pre>{html.escape(json.dumps(figures['inputs'], indent=2))}</pre>"
        "</body></html>\n"
    )


def steps_csv(simulation: Simulation) -> str:
    """One row per step: its epoch, start and end (s), wait (s), samples and throughput (samples/s)."""
    rows = zip(
        simulation.epoch_of_step.tolist(),
        simulation.step_start.tolist(),
        simulation.step_end.tolist(),
        simulation.wait.tolist(),
        simulation.samples_per_step.tolist(),
        simulation.throughput.tolist(),
    )
    lines = ["step,epoch,start_s,end_s,wait_s,samples,samples_per_s"]
    lines += [
        f"{step},{epoch},{start:.6f},{end:.6f},{wait:.6f},{samples},{rate:.3f}"
        for step, (epoch, start, end, wait, samples, rate) in enumerate(rows)
    ]
    return "\n".join(lines) + "\n"


def write_report(simulation: Simulation, folder: str | Path, *, price_per_gb: float = 0.0) -> Path:
    """Write the plots (PNG), ``summary.json``, ``steps.csv`` (every step's figures) and ``index.html``
    (self-contained) into ``folder``; return the page's path."""
    out = Path(folder)
    images = plots(simulation)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in images.items():
        (out / name).write_bytes(data)
    (out / "summary.json").write_text(to_json(simulation, price_per_gb=price_per_gb) + "\n")
    (out / "steps.csv").write_text(steps_csv(simulation))
    page = out / "index.html"
    page.write_text(render_html(simulation, images, price_per_gb=price_per_gb), encoding="utf-8")
    return page


__all__ = [
    "rate_bin",
    "request_rates",
    "format_seconds",
    "format_table",
    "format_start_up",
    "format_tuning",
    "inputs",
    "plots",
    "render_html",
    "require_plotting",
    "steps_csv",
    "summary",
    "to_json",
    "write_report",
]
