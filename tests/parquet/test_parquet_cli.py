"""``stream-plugin index-parquet``: index a folder from the command line, beside the data or in --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_files

from stream_plugin.cli import main


def test_index_parquet_writes_the_index_beside_the_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_files(tmp_path)
    assert main(["index-parquet", str(tmp_path), "--shard-bytes", "1mb"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path}/index.json: 4 files, 4 shards of up to 1.0 MiB, 600 rows"
    assert len(json.loads((tmp_path / "index.json").read_text())["shards"]) == 4


def test_index_parquet_out_writes_the_index_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_files(tmp_path / "data")
    assert main(["index-parquet", str(tmp_path / "data"), "--out", str(tmp_path / "index")]) == 0
    assert not (tmp_path / "data" / "index.json").exists()
    shards = json.loads((tmp_path / "index" / "index.json").read_text())["shards"]
    assert shards[0]["parquet"]["source"] == str(tmp_path / "data")


def test_a_bad_shard_size_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index-parquet", str(tmp_path), "--shard-bytes", "lots"]) != 0
    assert "--shard-bytes: expected" in capsys.readouterr().err


def test_verify_fetches_and_decodes_every_parquet_shard(parquet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(parquet_dir), "--no-progress"]) == 0
    assert "ok: 12 shards verified (sizes, hashes), 600 samples decoded" in capsys.readouterr().out


def test_verify_names_a_changed_parquet_file(parquet_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = parquet_dir / "part-002.parquet"
    target.write_bytes(target.read_bytes() + b"tail")
    assert main(["verify", str(parquet_dir), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "FAILED shard.00006.parquet: part-002.parquet: expected the Parquet file the index describes" in err
    assert "3 of 12 shards failed verification" in err
