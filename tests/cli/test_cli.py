"""The ``stream-plugin`` console script, run as a real subprocess on real datasets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import FIXTURES_DIR
from support.remotes import Remote

from stream_plugin import MDSWriter
from stream_plugin.format.index import load_index
from stream_plugin.format.reader import open_shard

SCRIPT = Path(sys.executable).with_name("stream-plugin")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def test_inspect_prints_streams_shards_columns_compression_and_sizes() -> None:
    result = run_cli("inspect", str(FIXTURES_DIR / "mds-zstd"))
    assert result.returncode == 0, result.stderr
    assert "shards:       3" in result.stdout
    assert "samples:      300" in result.stdout
    assert "label:int, text:str, tokens:ndarray:int32" in result.stdout
    assert "compression:  zstd" in result.stdout
    assert "size (raw):   37.6 KiB" in result.stdout


def test_inspect_walks_every_stream_under_a_folder() -> None:
    result = run_cli("inspect", str(FIXTURES_DIR))
    assert result.returncode == 0, result.stderr
    assert "streams: 12" in result.stdout
    assert "stream: mds-merged" in result.stdout
    assert "stream: mds-merged/0" not in result.stdout  # the merged index already covers its sub-folders


def test_verify_passes_on_every_fixture() -> None:
    result = run_cli("verify", str(FIXTURES_DIR), "--no-progress", "--allow-unsafe-types")
    assert result.returncode == 0, result.stderr
    assert "48 shards verified" in result.stdout
    assert "2,363 samples decoded" in result.stdout


def test_verify_without_unsafe_opt_in_checks_but_does_not_decode_pickle() -> None:
    result = run_cli("verify", str(FIXTURES_DIR / "mds-all-encodings"), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "12 shards with pkl columns not decoded" in result.stdout


def test_verify_names_a_corrupt_shard_and_exits_non_zero(tmp_path: Path) -> None:
    dataset = tmp_path / "mds-gz"
    shutil.copytree(FIXTURES_DIR / "mds-gz", dataset)
    shard = dataset / "shard.00001.mds.gz"
    os.chmod(shard, 0o644)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = run_cli("verify", str(dataset), "--no-progress")
    assert result.returncode == 1
    assert "FAILED shard.00001.mds.gz" in result.stderr
    assert "1 of 3 shards failed verification" in result.stderr


def test_verify_reports_a_missing_shard(tmp_path: Path) -> None:
    dataset = tmp_path / "mds-merged"
    shutil.copytree(FIXTURES_DIR / "mds-merged", dataset)
    os.chmod(dataset / "1", 0o755)
    (dataset / "1" / "shard.00002.mds").unlink()
    result = run_cli("verify", str(dataset), "--no-progress")
    assert result.returncode == 1
    assert "FAILED 1/shard.00002.mds" in result.stderr


def test_inspect_and_verify_read_a_dataset_on_a_remote(remote: Remote) -> None:
    remote.upload_folder(FIXTURES_DIR / "mds-snappy", "data/snappy")
    env = remote.environment()
    inspected = run_cli("inspect", remote.url("data/snappy"), env=env)
    assert inspected.returncode == 0, inspected.stderr
    assert "compression:  snappy" in inspected.stdout
    verified = run_cli("verify", remote.url("data/snappy"), "--no-progress", env=env)
    assert verified.returncode == 0, verified.stderr
    assert "300 samples decoded" in verified.stdout


def test_convert_writes_to_a_remote_that_verify_then_reads(remote: Remote, tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"text": f"row {i}", "label": i}) + "\n" for i in range(200)))
    env = remote.environment()
    converted = run_cli("convert", str(source), remote.url("converted"), "--size-limit", "4kb", "--no-progress", env=env)
    assert converted.returncode == 0, converted.stderr
    assert "converted/index.json" in remote.keys("converted/")
    verified = run_cli("verify", remote.url("converted"), "--no-progress", env=env)
    assert verified.returncode == 0, verified.stderr
    assert "200 samples decoded" in verified.stdout


def test_inspect_of_a_folder_without_index_explains(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path))
    assert result.returncode == 2
    assert "expected a dataset folder holding index.json" in result.stderr


def test_convert_json_lines_infers_columns_and_round_trips(tmp_path: Path) -> None:
    rows = [{"text": f"row {i}", "label": i, "score": i / 4, "meta": {"i": i}} for i in range(500)]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "mds"
    result = run_cli(
        "convert", str(source), str(out), "--compression", "zstd", "--size-limit", "8kb", "--no-progress"
    )
    assert result.returncode == 0, result.stderr
    entries = load_index(out)
    assert len(entries) > 1
    assert entries[0].config["column_encodings"] == ["int", "json", "float64", "str"]
    assert run_cli("verify", str(out), "--no-progress").returncode == 0


def test_convert_csv_with_explicit_columns(tmp_path: Path) -> None:
    source = tmp_path / "rows.csv"
    source.write_text("word,count\n" + "".join(f"w{i},{i}\n" for i in range(50)))
    out = tmp_path / "mds"
    result = run_cli("convert", str(source), str(out), "--columns", "word:str,count:int", "--no-progress")
    assert result.returncode == 0, result.stderr
    entry = load_index(out)[0]
    reader = open_shard(entry, out)
    assert reader.read(7) == {"count": 7, "word": "w7"}


def test_convert_refuses_unknown_file_types(tmp_path: Path) -> None:
    source = tmp_path / "rows.xml"
    source.write_text("<rows/>")
    result = run_cli("convert", str(source), str(tmp_path / "out"))
    assert result.returncode == 2
    assert "expected a .jsonl, .json, .csv, .tsv or .parquet file, found suffix '.xml'" in result.stderr


def test_convert_refuses_a_bad_columns_argument(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text('{"a": 1}\n')
    result = run_cli("convert", str(source), str(tmp_path / "out"), "--columns", "a")
    assert result.returncode == 2
    assert "expected name:encoding pairs" in result.stderr


def test_convert_keeps_an_existing_dataset_unless_told(tmp_path: Path) -> None:
    out = tmp_path / "mds"
    with MDSWriter(out=str(out), columns={"a": "int"}) as writer:
        writer.write({"a": 1})
    source = tmp_path / "rows.jsonl"
    source.write_text('{"a": 2}\n')
    refused = run_cli("convert", str(source), str(out), "--no-progress")
    assert refused.returncode == 2
    assert "pass --exist-ok to replace its contents" in refused.stderr
    assert run_cli("convert", str(source), str(out), "--exist-ok", "--no-progress").returncode == 0
    assert open_shard(load_index(out)[0], out).read(0) == {"a": 2}


@pytest.mark.parametrize("command", ["inspect", "verify", "convert"])
def test_every_command_has_plain_help_with_an_example(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert f"examples:\n  stream-plugin {command} " in result.stdout
    assert "``" not in result.stdout  # no reStructuredText markup


def test_version_is_the_package_version_from_the_script_and_python_m() -> None:
    from stream_plugin._version import __version__

    assert run_cli("--version").stdout.strip() == f"stream-plugin {__version__}"
    module = subprocess.run(
        [sys.executable, "-m", "stream_plugin", "--version"], capture_output=True, text=True, check=True
    )
    assert module.stdout.strip() == f"stream-plugin {__version__}"


def test_inspect_json_reports_every_stream_as_json() -> None:
    result = run_cli("inspect", str(FIXTURES_DIR / "mds-zstd"), "--json", "--shards")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["samples"] == 300
    [stream] = report["streams"]
    assert stream["shards"] == 3
    assert stream["columns"] == {"label": "int", "text": "str", "tokens": "ndarray:int32"}
    assert stream["compression"] == ["zstd"]
    assert sum(shard["samples"] for shard in stream["shard_list"]) == 300


def test_inspect_into_a_closed_pipe_exits_quietly() -> None:
    # `true` exits without reading, so inspect's output meets a closed pipe (as with `| head`).
    script = f"{SCRIPT} inspect --shards {FIXTURES_DIR} | true; echo ${{PIPESTATUS[0]}}"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stderr == ""
    assert result.stdout.strip() == "141"  # 128 + SIGPIPE, as a command killed by the closed pipe


def test_a_size_limit_of_one_sample_per_shard_warns_with_the_flag_name(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"text": "x" * 100}) + "\n" for _ in range(5)))
    result = run_cli("convert", str(source), str(tmp_path / "out"), "--size-limit", "64", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "stream-plugin: warning: --size-limit 64 bytes holds a single sample of about" in result.stderr
    assert len(load_index(tmp_path / "out")) == 5
    sensible = run_cli("convert", str(source), str(tmp_path / "out2"), "--no-progress")
    assert "warning" not in sensible.stderr


def test_convert_with_stderr_piped_prints_one_summary_line(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(f'{{"text": "row {i}", "label": {i}}}\n' for i in range(200_000)))
    result = run_cli("convert", str(source), str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert len(result.stderr) < 4096
    [summary] = result.stderr.splitlines()
    assert summary.startswith("convert: wrote 200,000 samples (") and " in 1 part to " in summary
    assert "samples/s" in summary


def test_verify_with_stderr_piped_ends_with_a_summary_of_shards_and_bytes() -> None:
    result = run_cli("verify", str(FIXTURES_DIR / "mds-zstd"))
    assert result.returncode == 0, result.stderr
    [summary] = result.stderr.splitlines()
    assert summary.startswith("verify: 3 shards, ")
    assert "shards/s" in summary


def test_convert_of_parquet_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    source = tmp_path / "rows.parquet"
    source.write_bytes(b"PAR1")
    hide_pyarrow = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ImportError('No module named pyarrow')\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from stream_plugin.cli import main\n"
        f"sys.exit(main(['convert', {str(source)!r}, {str(tmp_path / 'out')!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", hide_pyarrow], capture_output=True, text=True)
    assert result.returncode == 2
    assert "reading Parquet needs pyarrow" in result.stderr
    assert "pip install 'stream-plugin[parquet]'" in result.stderr
