"""Bad arguments, bad values and damaged files fail with a message that names the problem and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from writer_rig import TEXT_COLUMNS, make_writer, text_samples, write_dataset

from stream_plugin.errors import (
    ConfigError,
    EncodingError,
    IndexFormatError,
    ShardIntegrityError,
    UnknownEncodingError,
    UnsafePathError,
    UnsafeTypeError,
)
from stream_plugin.format.index import INDEX_BASENAME, load_index
from stream_plugin.format.reader import check_shard_file, materialize_shard, open_shard
from stream_plugin.format.writer import CSVWriter, JSONWriter, MDSWriter, XSVWriter

# ---- writer arguments and values ----


def test_unknown_mds_encoding_names_the_column(tmp_path: Path) -> None:
    with pytest.raises(
        UnknownEncodingError, match=r"MDSWriter column 'x': expected a column encoding in .* found 'nope'"
    ):
        MDSWriter(columns={"x": "nope"}, out=str(tmp_path))
    assert not any(tmp_path.iterdir())  # refused before touching the output folder


@pytest.mark.parametrize("writer", [JSONWriter, CSVWriter])
def test_unknown_text_column_type_names_the_column(writer: type, tmp_path: Path) -> None:
    with pytest.raises(
        UnknownEncodingError, match=r"column 'x': expected a type in \['str', 'int', 'float'\], found 'bytes'"
    ):
        writer(columns={"x": "bytes"}, out=str(tmp_path))


def test_value_of_the_wrong_type_names_column_and_value(tmp_path: Path) -> None:
    with MDSWriter(columns={"x": "int"}, out=str(tmp_path)) as writer:
        with pytest.raises(
            EncodingError, match=r"column 'x': encoding 'int' expects an integer .*, found str 'a'"
        ):
            writer.write({"x": "a"})
        writer.write({"x": 1})


def test_value_of_the_wrong_size_names_column_and_sizes(tmp_path: Path) -> None:
    with MDSWriter(columns={"x": "ndarray:uint8:2,2"}, out=str(tmp_path)) as writer:
        with pytest.raises(
            EncodingError,
            match=r"column 'x': encoding 'ndarray:uint8:2,2' stores exactly 4 bytes per value, found 3",
        ):
            writer.write({"x": b"abc"})
        with pytest.raises(EncodingError, match=r"column 'x'.*shape \(2, 2\) \(found shape \(3,\)\)"):
            writer.write({"x": np.zeros(3, np.uint8)})


@pytest.mark.parametrize("fmt", ["mds", "json", "csv"])
def test_sample_missing_a_column_is_refused(fmt: str, tmp_path: Path) -> None:
    writer = make_writer(fmt, str(tmp_path), TEXT_COLUMNS)
    with pytest.raises(
        EncodingError,
        match=r"expected every column .* in the sample, found it lacks \['x'\]; add the missing keys",
    ):
        writer.write({"n": 1, "word": "w"})
    writer.finish()


@pytest.mark.parametrize("value", ["a,b", "a\nb"])
def test_csv_value_holding_the_separator_or_newline_is_refused(value: str, tmp_path: Path) -> None:
    writer = CSVWriter(columns={"word": "str"}, out=str(tmp_path))
    with pytest.raises(
        EncodingError,
        match=r"CSVWriter column 'word': expected a value without the separator ',' or the newline '\\n' .* write the dataset with JSONWriter or MDSWriter",
    ):
        writer.write({"word": value})
    writer.finish()


def test_xsv_column_name_holding_the_separator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"XSVWriter: expected column names without the separator '\|'.*found 'a\|b'; rename",
    ):
        XSVWriter(columns={"a|b": "str"}, separator="|", out=str(tmp_path))


@pytest.mark.parametrize("size_limit", [1 << 32, "4gb", "5gb"])
def test_size_limit_of_2_to_the_32_or_more_is_refused_with_the_maximum(
    size_limit: int | str, tmp_path: Path
) -> None:
    with pytest.raises(
        ConfigError,
        match=r"size_limit: expected at most 4294967295 bytes \(2\*\*32 - 1; shard offsets are uint32\), found \d+",
    ):
        MDSWriter(columns={"x": "int"}, out=str(tmp_path), size_limit=size_limit)


def test_negative_size_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"size_limit: expected a byte count >= 0, found -1"):
        MDSWriter(columns={"x": "int"}, out=str(tmp_path), size_limit=-1)


def test_unknown_compression_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"zip"):
        MDSWriter(columns={"x": "int"}, out=str(tmp_path), compression="zip")


# ---- index.json ----


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"shards": []}', r"expected index version 2, found no 'version' key"),
        ('{"shards": [], "version": 1}', r"expected index version 2, found version 1"),
        ("not json", r"expected a JSON document, found invalid JSON"),
    ],
)
def test_bad_index_json_is_refused_naming_the_file(text: str, message: str, tmp_path: Path) -> None:
    (tmp_path / INDEX_BASENAME).write_text(text)
    with pytest.raises(IndexFormatError, match=rf"{tmp_path / INDEX_BASENAME}: {message}"):
        load_index(tmp_path)


@pytest.mark.parametrize("basename", ["../x", "/etc/passwd", "a/../../x"])
def test_basename_escaping_the_dataset_folder_is_refused(basename: str, tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(3), TEXT_COLUMNS)
    index = json.loads((tmp_path / INDEX_BASENAME).read_text())
    index["shards"][0]["raw_data"]["basename"] = basename
    (tmp_path / INDEX_BASENAME).write_text(json.dumps(index))
    with pytest.raises(UnsafePathError, match=rf"basename '{basename}' escapes the dataset folder"):
        load_index(tmp_path)


# ---- damaged shard files ----


@pytest.mark.parametrize("fmt", ["mds", "json", "csv"])
def test_shard_whose_size_differs_from_the_index_is_refused(fmt: str, tmp_path: Path) -> None:
    write_dataset(fmt, str(tmp_path), text_samples(10), TEXT_COLUMNS)
    (entry,) = load_index(tmp_path)
    path = tmp_path / entry.raw_data.basename
    path.write_bytes(path.read_bytes()[:-3])
    message = rf"{path}: expected {entry.raw_data.bytes} bytes as index.json records .* found {entry.raw_data.bytes - 3}\. .* download it again"
    with pytest.raises(ShardIntegrityError, match=message):
        open_shard(entry, tmp_path)
    with pytest.raises(ShardIntegrityError, match=message):
        check_shard_file(entry, tmp_path)


def test_missing_raw_file_is_reported_with_the_fix(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(3), TEXT_COLUMNS, compression="zstd")
    (entry,) = load_index(tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=r"shard\.00000\.mds: expected the MDS shard file named in index.json, found no such file.*materialize_shard",
    ):
        open_shard(entry, tmp_path)


def test_sample_count_in_the_file_header_must_match_the_index(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(3), TEXT_COLUMNS)
    index = json.loads((tmp_path / INDEX_BASENAME).read_text())
    index["shards"][0]["samples"] = 4
    (tmp_path / INDEX_BASENAME).write_text(json.dumps(index))
    with pytest.raises(
        ShardIntegrityError, match=r"expected 4 samples as index.json says, found 3 in the file header"
    ):
        open_shard(load_index(tmp_path)[0], tmp_path)


def test_hash_mismatch_is_refused_naming_the_algorithm(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(10), TEXT_COLUMNS, hashes=["sha256"])
    (entry,) = load_index(tmp_path)
    path = tmp_path / entry.raw_data.basename
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    path.write_bytes(bytes(data))
    check_shard_file(entry, tmp_path)  # sizes still agree
    with pytest.raises(
        ShardIntegrityError,
        match=r"expected sha256 digest [0-9a-f]{64} \(from index.json\), found [0-9a-f]{64}",
    ):
        check_shard_file(entry, tmp_path, validate_hash=True)


def test_truncated_compressed_shard_is_refused(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), text_samples(10), TEXT_COLUMNS, compression="zstd")
    (entry,) = load_index(tmp_path)
    path = tmp_path / entry.zip_data.basename
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(
        ShardIntegrityError,
        match=r"shard\.00000\.mds\.zstd: expected \d+ bytes as index.json records for this compressed shard file, found \d+",
    ):
        materialize_shard(entry, tmp_path)
    assert not (tmp_path / entry.raw_data.basename).exists()


@pytest.mark.parametrize("compression", ["zstd", "gz", "bz2", "br", "snappy"])
def test_corrupt_compressed_shard_is_refused_and_leaves_no_raw_file(compression: str, tmp_path: Path) -> None:
    write_dataset("json", str(tmp_path), text_samples(10), TEXT_COLUMNS, compression=compression)
    (entry,) = load_index(tmp_path)
    path = tmp_path / entry.zip_data.basename
    path.write_bytes(b"\x00" * entry.zip_data.bytes)  # right size, garbage content
    with pytest.raises(ShardIntegrityError, match=rf"shard\.00000\.json\.{compression}: expected"):
        materialize_shard(entry, tmp_path)
    assert (
        sorted(
            p.name
            for p in tmp_path.iterdir()
            if "shard.00000.json" in p.name and not p.name.endswith(compression)
        )
        == []
    )


def test_pkl_column_is_refused_without_allow_unsafe_types(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path), [{"obj": {"a": (1, 2)}}], {"obj": "pkl"})
    (entry,) = load_index(tmp_path)
    with pytest.raises(
        UnsafeTypeError,
        match=r"MDS shard shard\.00000\.mds: column\(s\) \['obj'\] use an unsafe encoding \(pkl\).*pass allow_unsafe_types=True",
    ):
        open_shard(entry, tmp_path)
    assert open_shard(entry, tmp_path, allow_unsafe_types=True).read(0) == {"obj": {"a": (1, 2)}}


def test_writing_after_finish_is_refused(tmp_path: Path) -> None:
    writer = make_writer("mds", str(tmp_path), TEXT_COLUMNS)
    writer.finish()
    with pytest.raises(
        ConfigError, match=r"MDSWriter: expected an open writer, found it finished or aborted"
    ):
        writer.write(text_samples(1)[0])
