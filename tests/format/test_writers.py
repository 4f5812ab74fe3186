"""Writers: byte-identical to MosaicML 0.13 on its own fixtures, round trips, rolling, remote out, exist_ok."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixture_values import manifest, to_value
from support.paths import FIXTURES_DIR
from writer_rig import (
    TEXT_COLUMNS,
    assert_same_compressed,
    make_writer,
    raw_files,
    read_dataset,
    stored_files,
    text_samples,
    without_zip,
    write_dataset,
)

from stream_plugin.errors import StorageError
from stream_plugin.format import writer_base
from stream_plugin.format.index import INDEX_BASENAME, load_index
from stream_plugin.format.mds import MDSShardReader
from stream_plugin.format.reader import materialize_shard, open_shard
from stream_plugin.format.writer import MDSWriter, OutputExistsError

# Fixtures whose every value can be rebuilt from manifest.json (no images, no pickles, not merged).
REBUILDABLE = [
    name
    for name, dataset in sorted(manifest().items())
    if name != "mds-merged"
    and all(tagged["type"] not in ("image", "json") for tagged in dataset["samples"][0].values())
]
COMPRESSIONS = [None, "zstd", "zstd:7", "gz", "bz2", "br:5", "snappy"]
FORMATS = ["mds", "json", "csv", "tsv", "xsv"]


def _materialized_copy(source: Path, target: Path) -> list:
    shutil.copytree(source, target)
    entries = load_index(target)
    for entry in entries:
        materialize_shard(entry, target)
    return entries


def _assert_same_dataset(mine_dir: Path, fixture_dir: Path, tmp_path: Path) -> None:
    """Same index entries, same raw bytes, same compressed bytes (up to codec settings) as the fixture."""
    theirs = _materialized_copy(fixture_dir, tmp_path / "theirs")
    mine = load_index(mine_dir)
    assert [without_zip(entry) for entry in mine] == [without_zip(entry) for entry in theirs]
    for my_entry, their_entry in zip(mine, theirs):
        for my_file, their_file in zip(stored_files(my_entry), stored_files(their_entry)):
            assert my_file.basename == their_file.basename
            my_bytes = (mine_dir / my_file.basename).read_bytes()
            their_bytes = (tmp_path / "theirs" / their_file.basename).read_bytes()
            if my_entry.compression is None:
                assert my_bytes == their_bytes, my_file.basename
            else:
                assert_same_compressed(my_entry.compression.split(":")[0], my_bytes, their_bytes)
        for raw in raw_files(my_entry):
            materialize_shard(my_entry, mine_dir)
            assert (mine_dir / raw.basename).read_bytes() == (tmp_path / "theirs" / raw.basename).read_bytes()


@pytest.mark.parametrize("name", REBUILDABLE)
def test_rewriting_a_fixture_gives_mosaicml_bytes(name: str, tmp_path: Path) -> None:
    dataset = manifest()[name]
    first = load_index(FIXTURES_DIR / name)[0]
    out = tmp_path / "mine"
    samples = [
        {column: to_value(tagged) for column, tagged in sample.items()} for sample in dataset["samples"]
    ]
    write_dataset(
        first.format,
        str(out),
        samples,
        dataset["columns"],
        compression=first.compression,
        hashes=list(first.hashes),
        size_limit=first.size_limit,
    )
    if first.compression is None:
        assert (out / INDEX_BASENAME).read_bytes() == (FIXTURES_DIR / name / INDEX_BASENAME).read_bytes()
    _assert_same_dataset(out, FIXTURES_DIR / name, tmp_path)


def test_rewriting_every_encoding_from_raw_column_bytes_gives_mosaicml_bytes(tmp_path: Path) -> None:
    """Images and pickles cannot be rebuilt from the manifest; pass each column's stored bytes instead."""
    fixture = FIXTURES_DIR / "mds-all-encodings"
    entries = load_index(fixture)
    first = entries[0]
    columns = dict(zip(first.config["column_names"], first.config["column_encodings"]))
    out = tmp_path / "mine"
    with MDSWriter(
        columns=columns, out=str(out), hashes=list(first.hashes), size_limit=first.size_limit
    ) as writer:
        for entry in entries:
            reader = MDSShardReader(entry, fixture, allow_unsafe_types=True)
            for index in range(reader.num_samples):
                writer.write({name: bytes(view) for name, view in reader.raw_columns(index).items()})
            reader.close()
    assert (out / INDEX_BASENAME).read_bytes() == (fixture / INDEX_BASENAME).read_bytes()
    for entry in entries:
        assert (out / entry.raw_data.basename).read_bytes() == (
            fixture / entry.raw_data.basename
        ).read_bytes()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_every_format_and_compression_with_hashes(
    fmt: str, compression: str | None, tmp_path: Path
) -> None:
    samples = text_samples(60)
    out = tmp_path / "out"
    write_dataset(
        fmt,
        str(out),
        samples,
        TEXT_COLUMNS,
        compression=compression,
        hashes=["sha1", "xxh64"],
        size_limit=600,
    )
    entries = load_index(out)
    assert len(entries) > 1
    for entry in entries:
        assert entry.compression == compression and entry.hashes == ("sha1", "xxh64")
        for raw, zipped in entry.file_pairs():
            assert set(raw.hashes) == {"sha1", "xxh64"}
            assert (zipped is None) == (compression is None)
            assert not (out / raw.basename).exists() or compression is None  # only compressed files stored
    assert read_dataset(out) == samples


def test_mds_round_trip_keeps_every_value_type(tmp_path: Path) -> None:
    columns = {
        "i": "int",
        "s": "str",
        "f": "float32",
        "arr": "ndarray",
        "fixed": "ndarray:int16:2,3",
        "j": "json",
    }
    samples = [
        {
            "i": -i,
            "s": "ü" * i,
            "f": np.float32(i / 3),
            "arr": np.arange(i + 1, dtype=np.uint16),
            "fixed": np.full((2, 3), i, np.int16),
            "j": {"k": [i]},
        }
        for i in range(20)
    ]
    write_dataset("mds", str(tmp_path), samples, columns, hashes=["md5"])
    for mine, expected in zip(read_dataset(tmp_path), samples):
        assert mine.keys() == expected.keys()
        for key, value in expected.items():
            assert np.array_equal(mine[key], value) if isinstance(value, np.ndarray) else mine[key] == value


@pytest.mark.parametrize("fmt", FORMATS)
def test_shards_roll_before_a_sample_would_pass_size_limit(fmt: str, tmp_path: Path) -> None:
    write_dataset(fmt, str(tmp_path), text_samples(200), TEXT_COLUMNS, size_limit="1kb")
    entries = load_index(tmp_path)
    assert len(entries) > 3 and all(entry.size_limit == 1024 for entry in entries)
    for entry, following in zip(entries, entries[1:]):
        reader = open_shard(following, tmp_path)
        next_sample = len(reader.raw_sample(0)) + (4 if fmt == "mds" else 0)
        reader.close()
        # Counted as MosaicML counts: the whole MDS file; the data file without any CSV header line.
        header = 0 if fmt in ("mds", "json") else len(b"n|word|x\n")
        counted = entry.raw_data.bytes - header
        assert counted <= 1024 < counted + next_sample


def test_a_sample_larger_than_size_limit_gets_its_own_shard_and_no_empty_one(tmp_path: Path) -> None:
    samples = [{"b": b"x" * 5000}, {"b": b"y"}, {"b": b"z" * 5000}]
    write_dataset("mds", str(tmp_path), samples, {"b": "bytes"}, size_limit=1000)
    assert [entry.samples for entry in load_index(tmp_path)] == [1, 1, 1]
    assert read_dataset(tmp_path) == samples


@pytest.mark.parametrize("size_limit", [None, 0])
def test_no_size_limit_writes_one_shard(size_limit: int | None, tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(500), TEXT_COLUMNS, size_limit=size_limit)
    (entry,) = load_index(tmp_path)
    assert entry.samples == 500 and entry.size_limit is None


def test_an_empty_dataset_has_an_index_without_shards(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), [], TEXT_COLUMNS)
    assert json.loads((tmp_path / INDEX_BASENAME).read_text()) == {"shards": [], "version": 2}


def _remote_pair(tmp_path: Path) -> tuple[Path, Path, tuple[str, str]]:
    local, remote = tmp_path / "local", tmp_path / "remote"
    return local, remote, (str(local), remote.as_uri())


@pytest.mark.parametrize("keep_local", [True, False])
def test_remote_out_uploads_every_shard_then_the_index(keep_local: bool, tmp_path: Path) -> None:
    local, remote, out = _remote_pair(tmp_path)
    samples = text_samples(80)
    write_dataset(
        "mds",
        out,
        samples,
        TEXT_COLUMNS,
        compression="zstd",
        size_limit=500,
        keep_local=keep_local,
        max_workers=2,
    )
    entries = load_index(remote)
    assert len(entries) > 2
    assert read_dataset(remote) == samples
    local_files = sorted(path.name for path in local.iterdir()) if local.exists() else []
    expected_local = (
        sorted([INDEX_BASENAME] + [entry.zip_data.basename for entry in entries]) if keep_local else []
    )
    assert local_files == expected_local


def test_remote_only_out_writes_through_a_temporary_local_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = tmp_path / "remote"
    # file:// counts as local for split_out; make it look like a bucket URL the way s3://... would.
    monkeypatch.setattr(writer_base, "split_out", lambda out: (None, out))
    writer = make_writer("json", remote.as_uri(), TEXT_COLUMNS, size_limit=300)
    with writer:
        for sample in text_samples(30):
            writer.write(sample)
    assert read_dataset(remote) == text_samples(30)
    assert not Path(writer.local).exists()


class FailingStore:
    """A remote whose uploads fail for shard files (not retried: the error is not transient)."""

    url = "mock://bucket/dataset"

    def __init__(self) -> None:
        self.uploaded: list[str] = []

    def upload(self, src: Any, key: str) -> None:
        if key.startswith("shard.00001"):
            raise StorageError(f"mock://bucket/dataset/{key}: access denied")
        self.uploaded.append(key)

    def exists(self, key: str) -> bool:
        return False  # an empty remote: the writer checks before its first upload

    def list(self, prefix: str = "") -> list[str]:
        return []


def test_an_upload_failure_raises_and_never_uploads_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FailingStore()
    monkeypatch.setattr(writer_base, "open_store", lambda url: store)
    local = tmp_path / "local"
    with pytest.raises(
        StorageError,
        match=r"expected to upload shard\.00001\.mds to mock://bucket/dataset.*index\.json was not uploaded",
    ):
        write_dataset(
            "mds",
            (str(local), "mock://bucket/dataset"),
            text_samples(200),
            TEXT_COLUMNS,
            size_limit=300,
            keep_local=True,
        )
    assert INDEX_BASENAME not in store.uploaded and "shard.00000.mds" in store.uploaded
    assert not (local / INDEX_BASENAME).exists()


def test_a_non_empty_output_folder_is_refused_without_exist_ok(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(
        OutputExistsError,
        match=r"found it holds files \(Directory is not empty\); pass exist_ok=True .* or choose another folder",
    ):
        make_writer("mds", str(tmp_path), TEXT_COLUMNS)
    assert isinstance(OutputExistsError("x"), FileExistsError)
    assert (tmp_path / "old.txt").exists()


def test_exist_ok_removes_the_old_index_before_the_old_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_dataset("mds", str(tmp_path), text_samples(50), TEXT_COLUMNS, size_limit=300)
    (tmp_path / "sub").mkdir()
    removed: list[str] = []
    real_rmtree = writer_base.shutil.rmtree

    def spying_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        removed.append(Path(path).name)
        assert not (tmp_path / INDEX_BASENAME).exists(), "old index must go first"
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(writer_base.shutil, "rmtree", spying_rmtree)
    write_dataset("json", str(tmp_path), text_samples(5), TEXT_COLUMNS, exist_ok=True)
    assert removed == ["sub"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        INDEX_BASENAME,
        "shard.00000.json",
        "shard.00000.json.meta",
    ]
    assert read_dataset(tmp_path) == text_samples(5)


def test_progress_bar_reports_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_dataset("mds", str(tmp_path), text_samples(50), TEXT_COLUMNS, size_limit=300, progress_bar=True)
    assert "samples" in capsys.readouterr().err
