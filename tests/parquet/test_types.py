"""What each Arrow type becomes in a sample, read from a Parquet shard (in place and from the cache)."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stream_plugin import StreamingDataset
from stream_plugin.parquet import index_parquet
from stream_plugin.parquet.decode import UnsupportedColumnError


def _read(folder: Path, tmp_path: Path, cache: str = "cache", **kwargs: Any) -> list[dict[str, Any]]:
    if not (folder / "index.json").exists():
        index_parquet(folder)
    dataset = StreamingDataset(remote=str(folder), local=str(tmp_path / cache), batch_size=1, **kwargs)
    return [dataset[i] for i in range(len(dataset))]


def test_scalars_strings_binary_and_timestamps(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    stamps = [datetime(2024, 1, 1, 12), datetime(2025, 6, 30)]
    table = pa.table(
        {
            "i": pa.array([1, -2], pa.int32()),
            "f": pa.array([0.5, 1.5], pa.float64()),
            "b": [True, False],
            "s": ["héllo", ""],
            "raw": [b"\x00\x01", b""],
            "t": pa.array(stamps, pa.timestamp("us")),
            "maybe": pa.array([7, None], pa.int64()),
        }
    )
    pq.write_table(table, folder / "a.parquet")
    first, second = _read(folder, tmp_path)
    assert first["i"] == 1 and first["i"].dtype == np.int32
    assert (first["f"], first["b"], first["s"], first["raw"]) == (0.5, True, "héllo", b"\x00\x01")
    assert second["t"] == np.datetime64("2025-06-30T00:00:00.000000")
    assert (first["maybe"], second["maybe"]) == (7, None)


def test_lists_of_numbers_are_ndarrays_and_nested_values_are_python(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    table = pa.table(
        {
            "tokens": pa.array([[1, 2, 3], [], [4]], pa.list_(pa.int64())),
            "fixed": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float32(), 2)),
            "nested": [[[1], [2, 3]], [], [[4]]],
            "record": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": None}],
            "mapping": pa.array([[("k", 1)], [], [("z", 2)]], pa.map_(pa.string(), pa.int64())),
        }
    )
    pq.write_table(table, folder / "a.parquet", row_group_size=2)  # the third row in a row group of its own
    rows = _read(folder, tmp_path)
    assert [row["tokens"].tolist() for row in rows] == [[1, 2, 3], [], [4]]
    assert isinstance(rows[2]["tokens"], np.ndarray) and rows[2]["tokens"].dtype == np.int64
    assert rows[1]["fixed"].tolist() == [3.0, 4.0]
    assert [row["nested"] for row in rows] == [[[1], [2, 3]], [], [[4]]]
    assert rows[2]["record"] == {"a": 3, "b": None}
    assert [row["mapping"] for row in rows] == [[("k", 1)], [], [("z", 2)]]


def test_the_hubs_image_feature_decodes_to_pil(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    pictures = [Image.new("RGB", (4, 3), color) for color in ("red", "blue")]
    hub = datasets.Dataset.from_dict(
        {"image": pictures, "label": [0, 1]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}),
    )
    folder = tmp_path / "data"
    folder.mkdir()
    hub.to_parquet(str(folder / "train.parquet"))
    rows = _read(folder, tmp_path)
    assert isinstance(rows[1]["image"], Image.Image)
    assert rows[1]["image"].size == (4, 3) and rows[1]["image"].getpixel((0, 0)) == (0, 0, 255)
    assert rows[1]["label"] == 1


def test_an_unsupported_type_names_the_column_and_its_arrow_type(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    table = pa.table({"id": [1], "key": pa.array([uuid.uuid4().bytes], pa.uuid())})
    pq.write_table(table, folder / "a.parquet")
    with pytest.raises(UnsupportedColumnError, match=r"found column 'key' of Arrow type extension<arrow.uuid>; leave it out with columns"):
        _read(folder, tmp_path)
    assert _read(folder, tmp_path, "narrow", columns=["id"]) == [{"id": 1}]


def test_a_local_only_stream_reads_the_files_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"id": np.arange(10), "s": [str(i) for i in range(10)]}), folder / "a.parquet", row_group_size=3)
    index_parquet(folder, shard_bytes=1)
    dataset = StreamingDataset(local=str(folder), batch_size=1, columns=["s"])
    assert [dataset[i]["s"] for i in range(10)] == [str(i) for i in range(10)]
    assert sorted(path.name for path in folder.iterdir()) == ["a.parquet", "index.json"]  # nothing copied


def test_a_local_only_stream_refuses_a_changed_file(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"id": np.arange(10)}), folder / "a.parquet")
    index_parquet(folder)
    pq.write_table(pa.table({"id": np.arange(11)}), folder / "a.parquet")
    with pytest.raises(Exception, match=r"expected \d+ bytes \(from index.json\), found \d+"):
        StreamingDataset(local=str(folder), batch_size=1)[0]


def test_read_columns_gives_arrays_for_numbers_and_lists_for_the_rest(tmp_path: Path) -> None:
    from stream_plugin.format.index import load_index
    from stream_plugin.format.reader import open_shard

    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"id": np.arange(6), "s": list("abcdef")}), folder / "a.parquet", row_group_size=2)
    index_parquet(folder)
    entry = load_index(folder)[0]
    from stream_plugin.parquet.entries import ReadView

    reader = open_shard(ReadView(columns=None, local=str(folder)).entry(entry), folder)
    columns = reader.read_columns([5, 0, 3])
    assert list(columns["id"]) == [5, 0, 3] and columns["s"] == ["f", "a", "d"]
    with pytest.raises(IndexError, match=r"expected a sample index in \[0, 6\), found 6"):
        reader.read(6)
    reader.close()


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_string_and_binary_columns_read_each_row_from_the_buffers_of_a_slice(arrow_type: pa.DataType) -> None:
    from stream_plugin.parquet.decode import decode_column

    values = ["a", "bc", "", "déf"]
    cells = [value if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else value.encode() for value in values]
    column = decode_column(pa.array(cells, arrow_type).slice(1, 3), None)
    assert [column[i] for i in range(3)] == cells[1:]
    assert [decode_column(pa.array([], arrow_type), None)[i] for i in range(0)] == []


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float32(), pa.float64()])
def test_numbers_are_views_of_the_arrow_buffer_with_the_columns_dtype(arrow_type: pa.DataType) -> None:
    from stream_plugin.parquet.decode import decode_column

    column = decode_column(pa.array(np.arange(5), arrow_type).slice(2, 3), None)
    assert isinstance(column, np.ndarray)
    assert column.tolist() == [2, 3, 4] and column.dtype == np.dtype(arrow_type.to_pandas_dtype())
