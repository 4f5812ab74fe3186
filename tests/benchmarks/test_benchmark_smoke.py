"""Tiny runs of the benchmark harness (our library only), so its code cannot rot; CI never installs peers.

The whole harness runs once in ``--smoke`` mode (ours and the bare ceiling, tiny sizes, one round, a
scratch output folder): every figure, the fresh-process runner, the loopback S3 server and the report.
Stub ``streaming`` and ``litdata`` packages that refuse to import prove the peers are never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_DIR

pytestmark = pytest.mark.slow

FIGURE_TITLES = (
    "Write throughput",
    "Iteration throughput from a warm local cache",
    "Peak memory, main process and each worker",
    "Cold start from S3 on loopback",
    "Resume latency",
    "Epoch-order build time and memory",
    "Egress: downloaded bytes per node for one epoch",
    "Token-block throughput (pre-training blocks across document boundaries)",
    "Image pipeline (the seeds' benchmark: JPEG, RandomResizedCrop, flip, float; batch 64, 2 workers)",
    "Large bytes samples in order, without a copy (10k x 100 KiB, 0 workers)",
    "Parquet read throughput (ours over a Parquet index, ours over MDS, litdata's Parquet path)",
    "Simulation: MosaicML's example side by side, and a billion-sample epoch (issue 29)",
    "A billion-sample epoch: time and memory",
)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("benchmarks")
    refusing = root / "peers-refuse-import"
    for package in ("streaming", "litdata"):
        (refusing / package).mkdir(parents=True)
        (refusing / package / "__init__.py").write_text(
            f"raise ImportError('the benchmark smoke imported {package}; it must measure ours only')\n"
        )
    command = [sys.executable, "-m", "benchmarks.harness", "--smoke"]
    command += ["--results-dir", str(root / "results"), "--report", str(root / "RESULTS.md")]
    command += ["--data-dir", str(root / "data")]
    result = subprocess.run(
        command,
        cwd=REPO_DIR,
        env={**os.environ, "PYTHONPATH": str(refusing)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return root


def test_smoke_report_has_every_figure(smoke_run: Path) -> None:
    report = (smoke_run / "RESULTS.md").read_text()
    for title in FIGURE_TITLES:
        assert f"## {title}" in report or f"### {title}" in report, title
    assert "## Targets" in report


def test_smoke_measures_ours_and_the_bare_ceiling_only(smoke_run: Path) -> None:
    report = (smoke_run / "RESULTS.md").read_text()
    assert "| stream_plugin |" in report
    assert "| bare mmap |" in report
    assert "| PIL ceiling (Pillow + transform, no reader) |" in report
    assert "| mosaicml-streaming |" not in report
    assert "| litdata |" not in report


def test_smoke_stores_each_figure_with_its_command(smoke_run: Path) -> None:
    stored = {path.stem: json.loads(path.read_text()) for path in (smoke_run / "results").glob("*.json")}
    assert set(stored) == {"write", "iterate", "cold", "resume", "order", "egress", "egress_epochs", "convert", "tokens", "images", "bytes", "parquet", "simulate"}
    for record in stored.values():
        assert record["command"].startswith("./benchmarks/run --smoke ")
        assert record["machine"][0].startswith("- machine: ")


def test_smoke_iteration_delivers_samples(smoke_run: Path) -> None:
    iterate = json.loads((smoke_run / "results" / "iterate.json").read_text())["result"]
    assert iterate["rows"], "the iteration figure has no rows"
    for row in iterate["rows"]:
        assert row["runs"], f"a row with no runs: {row}"
        for run in row["runs"]:
            assert run["samples"] > 0 and run["samples_per_s"] > 0


def _smoke_cli(module: str) -> str:
    """The standard output of ``python -m benchmarks.<module> --smoke``, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--smoke"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_write_benchmark_cli_smoke_prints_a_table() -> None:
    output = _smoke_cli("bench_write")
    assert "| write 2,000 x 1 KiB | stream_plugin |" in output
    assert "mosaicml-streaming |" not in output


def test_convert_benchmark_cli_smoke_prints_a_table() -> None:
    output = _smoke_cli("bench_convert")
    assert "| stream_plugin N=1 |" in output and "| stream_plugin N=2 |" in output
    assert "| litdata optimize" not in output and "| mosaicml MDSWriter" not in output


def test_simulate_benchmark_cli_smoke_prints_ours_side_by_side_and_at_scale() -> None:
    output = _smoke_cli("bench_simulate")
    assert "| stream_plugin (MosaicML's assumptions) | 50 |" in output
    assert "| stream_plugin (+ latency, decompression, reads) | 50 |" in output
    assert "mosaicml-streaming simulator |" not in output
    assert "10,000 shards x 100 samples (1,000,000 samples, 977 steps) on 4 nodes x 8 devices" in output


def test_index_benchmark_measures_every_situation_for_ours() -> None:
    command = [sys.executable, "-m", "benchmarks.bench_index", "--shards", "1k", "--ranks", "2"]
    result = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("1,000")]
    situations = [" ".join(row[3:-4]) for row in rows]
    assert situations == [
        "local cold",
        "local warm",
        "remote cold",
        "remote warm",
        "2 ranks local cold",
        "2 ranks local warm",
        "2 ranks remote cold",
    ]
    assert all(float(row[-4]) > 0 for row in rows)


def test_index_benchmark_with_shuffle_opens_shuffled_with_every_shard_file(tmp_path: Path) -> None:
    from benchmarks.bench_index import make_index, open_first_sample

    folder = tmp_path / "data"
    make_index(folder, 1_000, every_file=True)
    assert len(list(folder.glob("shard.*.mds"))) == 1_000
    assert (folder / "shard.0000999.mds").read_bytes() == (folder / "shard.0000000.mds").read_bytes()
    command = [sys.executable, "-m", "benchmarks.bench_index", "--shards", "1k", "--ranks", "2", "--shuffle"]
    result = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("shuffle=True")
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("1,000")]
    assert len(rows) == 7 and all(float(row[-4]) > 0 for row in rows)
    assert open_first_sample(str(folder), None, "ours", shuffle=True)["seconds"] > 0


def test_warm_page_cache_reads_every_file_of_the_dataset_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_DIR))
    from benchmarks.workloads import dataset_bytes, warm_page_cache

    (tmp_path / "shards").mkdir()
    (tmp_path / "index.json").write_bytes(b"{}")
    (tmp_path / "shards" / "shard.00000.mds").write_bytes(bytes(range(256)) * 40_000)  # over one chunk
    assert warm_page_cache(tmp_path, chunk=1 << 20) == dataset_bytes(tmp_path) == 2 + 256 * 40_000


def test_warm_page_cache_leaves_a_file_read_in_small_folios_mapped_in_huge_pages_as_its_writer_left_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.huge_pages import pmd_mapped_kib, require_huge_folios

    monkeypatch.syspath_prepend(str(REPO_DIR))
    from benchmarks.workloads import warm_page_cache

    require_huge_folios(tmp_path)
    shard = tmp_path / "shard.00000.mds"
    with open(shard, "wb", buffering=0) as handle:
        for _ in range(64):
            handle.write(os.urandom(1 << 16))  # 64 KiB writes: cached in small folios, like a read() back
    assert pmd_mapped_kib(shard) == 0
    assert warm_page_cache(tmp_path) == 4 << 20
    assert pmd_mapped_kib(shard) == 4 << 10
    # The other state, for measuring what huge pages are worth: dropped and read back with read().
    assert warm_page_cache(tmp_path, small_folios=True) == 4 << 20
    assert pmd_mapped_kib(shard) == 0
