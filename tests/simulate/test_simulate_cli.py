"""``stream-plugin simulate``, run as the real console script on real and synthetic datasets."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import FIXTURES_DIR, REPO_DIR
from support.s3_server import S3Bucket

from stream_plugin.simulate.config import OPTIONS

SCRIPT = Path(sys.executable).with_name("stream-plugin")
ZSTD = FIXTURES_DIR / "mds-zstd"
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="the PNG plots need matplotlib (pip install 'stream-plugin[simulate]')",
)
DOCS_PAGE = REPO_DIR / "docs" / "simulate.md"
DOCS_REPORT = REPO_DIR / "docs" / "simulate-report"
# Set to 1 to rewrite docs/simulate.md's table and docs/simulate-report/ from a fresh run.
REGENERATE = "STREAM_PLUGIN_REGENERATE_DOCS"
LEFT_OUT = ("steps.csv",)  # of the docs' copy of the report: a row per step is not for reading
SYNTHETIC = (
    "synthetic:\n  shards: 64\n  samples_per_shard: 1k\n  raw_bytes_per_shard: 64mb\n"
    "  stored_bytes_per_shard: 24mb\nbatch_size: 16\nshuffle: true\n"
)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "simulate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic.yaml"
    path.write_text(SYNTHETIC)
    return path


def test_help_lists_every_input_with_its_unit_and_examples() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for option in OPTIONS:
        assert re.search(rf"{option.flag} {option.metavar} .*?\[{re.escape(option.unit)}[;\]]", text), (
            option.flag
        )
    for flag in ("--json", "--report DIR", "--calibrate", "--tune"):
        assert flag in text
    assert "examples:\n  stream-plugin simulate " in result.stdout
    assert "``" not in result.stdout


def test_simulate_prints_the_table(synthetic: Path) -> None:
    result = run_cli(
        str(synthetic), "--nodes", "2", "--devices-per-node", "2", "--step-time", "0.1", "--epochs", "2",
        "--bandwidth", "10gbit", "--egress-price-per-gb", "0.09",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "simulated: 2,000 steps, 2 epoch(s), 2 node(s) x 2 device(s) x 8 worker(s)\n"
    )
    # 64 x 24 MiB once, and one index.json a node (64 x 275 bytes, estimated for a synthetic shape)
    assert "1.5 GiB in 66 requests (0 answered 429), $0.14 at $0.09/GB" in result.stdout
    assert "shuffle quality:" in result.stdout


def test_json_prints_the_summary(synthetic: Path) -> None:
    result = run_cli(
        str(synthetic), "--nodes", "2", "--devices-per-node", "2", "--max-duration", "100ba", "--json"
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["steps"] == 100
    assert [node["node"] for node in figures["nodes"]] == [0, 1]
    assert figures["inputs"]["hardware"]["max_steps"] == 100


@needs_matplotlib
def test_report_writes_a_page_with_its_plots_embedded(synthetic: Path, tmp_path: Path) -> None:
    result = run_cli(
        str(synthetic), "--nodes", "2", "--devices-per-node", "1", "--report", str(tmp_path / "out")
    )
    assert result.returncode == 0, result.stderr
    assert f"report: {tmp_path / 'out' / 'index.html'}" in result.stderr
    page = (tmp_path / "out" / "index.html").read_text()
    for png in (tmp_path / "out").glob("*.png"):
        assert base64.b64encode(png.read_bytes()).decode() in page
    assert len(list((tmp_path / "out").glob("*.png"))) == 5  # throughput, wait, egress, cache, requests


def test_report_without_matplotlib_names_the_extra_before_simulating(synthetic: Path, tmp_path: Path) -> None:
    hide = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ImportError('No module named matplotlib')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from stream_plugin.cli import main\n"
        f"sys.exit(main(['simulate', {str(synthetic)!r}, '--report', {str(tmp_path / 'out')!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "pip install 'stream-plugin[simulate]'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_real_dataset_is_simulated_from_its_index(s3_bucket: S3Bucket) -> None:
    s3_bucket.upload_folder(ZSTD, "data")
    env = {**s3_bucket.credentials, "S3_ENDPOINT_URL": s3_bucket.endpoint_url}
    result = run_cli(s3_bucket.url("data"), "--batch-size", "4", "--devices-per-node", "1", "--json", env=env)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["inputs"]["data"]["samples"] == 300
    assert figures["requests"] == 3 + 1  # each shard downloaded once, and the index.json
    assert figures["index_bytes_per_node"] == len(s3_bucket.get("data/index.json"))


def test_calibrate_measures_real_shards_and_uses_the_figures(s3_bucket: S3Bucket) -> None:
    s3_bucket.upload_folder(ZSTD, "data")
    env = {**s3_bucket.credentials, "S3_ENDPOINT_URL": s3_bucket.endpoint_url}
    result = run_cli(
        s3_bucket.url("data"), "--batch-size", "4", "--devices-per-node", "1", "--calibrate", "--sample-time", "0.5",
        "--json", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"calibrated on 3 shard\(s\), 300 samples: sample_time \S+, decompress_rate \S+", result.stderr
    )
    assert "the command line's sample_time kept" in result.stderr
    hardware = json.loads(result.stdout)["inputs"]["hardware"]
    assert hardware["sample_time"] == 0.5
    assert hardware["decompress_rate"] > 0
    # The loader's own costs on this machine: a worker's start-up (a fork at least) and a hand-over.
    assert re.search(r"decompress_rate \S+, worker_start \S+, handover \S+", result.stderr)
    assert hardware["worker_start"] > 0 and hardware["handover"] >= 0


def test_calibrate_refuses_a_synthetic_shape(synthetic: Path) -> None:
    result = run_cli(str(synthetic), "--calibrate")
    assert result.returncode == 2
    assert "--calibrate: expected a CONFIG with real shards, found a synthetic shape" in result.stderr


def test_tune_prints_a_ranking(synthetic: Path) -> None:
    result = run_cli(
        str(synthetic), "--nodes", "1", "--devices-per-node", "2", "--max-duration", "200ba", "--tune"
    )
    assert result.returncode == 0, result.stderr
    assert re.match(r"tuned: \d+ settings simulated, \d+ reach no stalled step after the first batch\n", result.stdout)
    assert re.search(r"\n  1 +(yes|no) +\d+ +\d+ ", result.stdout)


def test_tune_with_report_writes_the_first_ranked_settings_report(synthetic: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("the PNG plots need matplotlib (pip install 'stream-plugin[simulate]')")
    result = run_cli(
        str(synthetic),
        "--devices-per-node",
        "2",
        "--max-duration",
        "50ba",
        "--tune",
        "--report",
        str(tmp_path / "r"),
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"report of the first-ranked setting \(\{'predownload': \d+, ", result.stderr)
    assert (tmp_path / "r" / "index.html").exists()


def test_a_lightning_cli_yaml_is_simulated(tmp_path: Path) -> None:
    config = tmp_path / "fit.yaml"
    config.write_text(
        "trainer:\n  num_nodes: 2\n  devices: 2\n  max_epochs: 2\n"
        "data:\n  class_path: stream_plugin_lightning.StreamingDataModule\n  init_args:\n"
        f"    global_batch_size: 8\n    num_workers: 1\n    train:\n      local: {ZSTD}\n      shuffle: true\n"
    )
    result = run_cli(str(config), "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["steps"] == 2 * 38  # 300 samples in global batches of 8, twice
    assert figures["inputs"]["hardware"]["workers"] == 1


def test_an_llm_foundry_yaml_is_simulated(tmp_path: Path) -> None:
    config = tmp_path / "train.yaml"
    config.write_text(
        f"variables:\n  data_local: {ZSTD}\nmax_duration: 1ep\nglobal_train_batch_size: 8\n"
        "train_loader:\n  name: stream_plugin\n  dataset:\n    local: ${variables.data_local}\n"
        "    shuffle: true\n    max_seq_len: 16\n    eos_token_id: 2\n  drop_last: true\n  num_workers: 2\n"
    )
    result = run_cli(str(config), "--devices-per-node", "2", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["steps"] == 37  # 300 samples in whole global batches of 8
    assert figures["inputs"]["dataset"]["batch_size"] == 4
    assert figures["inputs"]["hardware"]["workers"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bandwidth", "0"], "bandwidth: expected a finite number > 0, found 0.0"),
        (["--num-canonical-nodes", "100000"], "--num-canonical-nodes: expected at most 64000"),
        (["--latency", "soon"], "--latency: expected seconds such as 0.03 or 30ms, found 'soon'"),
    ],
)
def test_impossible_hardware_is_a_clear_error(synthetic: Path, extra: list[str], message: str) -> None:
    result = run_cli(str(synthetic), *extra)
    assert result.returncode == 2
    assert result.stderr.startswith("stream-plugin simulate: error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_keys_and_unreadable_yaml_are_clear_errors(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(SYNTHETIC + "shuffle_sed: 3\n")
    result = run_cli(str(typo))
    assert result.returncode == 2
    assert "found unknown ['shuffle_sed']" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("synthetic: {shards: 3\n")
    result = run_cli(str(broken))
    assert result.returncode == 2
    assert "broken.yaml: expected YAML, found text it cannot read" in result.stderr


def _marked(page: str, mark: str) -> re.Match[str]:
    """The fenced block after ``<!-- simulate-report: MARK -->`` in the docs page."""
    match = re.search(rf"<!-- simulate-report: {mark} -->\n```\w+\n(.*?)\n```", page, re.DOTALL)
    assert match is not None, f"docs/simulate.md: expected a block marked 'simulate-report: {mark}'"
    return match


def test_the_docs_page_lists_every_option_with_its_unit() -> None:
    page = DOCS_PAGE.read_text()
    for option in OPTIONS:
        assert f"| `{option.flag}` | {option.unit} |" in page, option.flag


@needs_matplotlib
def test_the_docs_report_is_what_its_command_prints_now(tmp_path: Path) -> None:
    page = DOCS_PAGE.read_text()
    (tmp_path / "dataset.yaml").write_text(_marked(page, "config").group(1) + "\n")
    command = shlex.split(_marked(page, "command").group(1))
    assert command[:3] == ["stream-plugin", "simulate", "dataset.yaml"]
    result = subprocess.run(
        [str(SCRIPT), *command[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    table = _marked(page, "table")
    if os.environ.get(REGENERATE) == "1":
        DOCS_PAGE.write_text(page[: table.start(1)] + result.stdout.rstrip("\n") + page[table.end(1) :])
        shutil.rmtree(DOCS_REPORT, ignore_errors=True)
        shutil.copytree(tmp_path / "simulate-report", DOCS_REPORT, ignore=shutil.ignore_patterns(*LEFT_OUT))
        return
    assert result.stdout.rstrip("\n") == table.group(1), (
        f"docs/simulate.md's report is not what its command prints now: regenerate it with "
        f"{REGENERATE}=1 pytest tests/simulate/test_simulate_cli.py -k docs_report, and check its prose"
    )
    assert sorted(path.name for path in DOCS_REPORT.iterdir()) == sorted(
        path.name for path in (tmp_path / "simulate-report").iterdir() if path.name not in LEFT_OUT
    )


def test_tune_with_a_first_batch_target_searches_the_start_up(synthetic: Path) -> None:
    result = run_cli(
        str(synthetic), "--nodes", "4", "--devices-per-node", "2", "--rate-limit", "5", "--latency", "30ms",
        "--tune", "--target-first-batch", "10",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("start-up: 24 settings simulated to the first batch, ")
    assert "the store's 5 requests/s (a second's burst first) alone take" in result.stdout
    assert "start_stagger and first_shards are dataset options" in result.stdout
