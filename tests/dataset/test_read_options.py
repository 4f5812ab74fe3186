"""``StreamingDataset(decode=, zero_copy=)``: what the values of image and ``bytes`` columns are.

``zero_copy`` hands out read-only views of the shard's map; the lifetime rule (docs/reading.md): a view
keeps its shard's map alive, so it stays valid and equal after the reader closes the shard, after the
file is evicted (deleted), and after the dataset is gone.
"""

from __future__ import annotations

import gc
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from stream_plugin import MDSWriter, StreamingDataset
from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.format.index import load_index
from stream_plugin.format.read_options import ReadOptions, normalize_zero_copy
from stream_plugin.format.reader import open_shard
from stream_plugin.reading.config import DatasetConfig


def _payload(index: int) -> bytes:
    return np.random.default_rng(index).integers(0, 256, 100 + 37 * index, dtype=np.uint8).tobytes()


def _write(folder: Path, count: int = 12) -> Path:
    columns = {"data": "bytes", "image": "png", "label": "int", "text": "str"}
    with MDSWriter(out=str(folder), columns=columns, size_limit=1 << 11) as writer:
        for index in range(count):
            image = Image.fromarray(np.full((4, 6, 3), index, np.uint8), "RGB")
            writer.write({"data": _payload(index), "image": image, "label": index, "text": str(index)})
    return folder


def test_decode_tensor_yields_uint8_chw_tensors_of_the_images(tmp_path: Path) -> None:
    dataset = StreamingDataset(local=str(_write(tmp_path)), batch_size=4, decode="tensor")
    samples = list(dataset)
    for sample in samples:
        assert sample["image"].dtype == torch.uint8 and tuple(sample["image"].shape) == (3, 4, 6)
        assert bool((sample["image"] == sample["label"]).all())
    assert isinstance(dataset[3]["image"], torch.Tensor)


def test_decode_per_column_is_checked_against_the_columns_when_the_dataset_is_built(tmp_path: Path) -> None:
    local = str(_write(tmp_path))
    assert isinstance(StreamingDataset(local=local, batch_size=4, decode={"image": "tensor"})[0]["image"], torch.Tensor)
    with pytest.raises(ConfigError, match=r"decode=\{'text': 'tensor'\} expects an image column .* found encoding 'str'"):
        StreamingDataset(local=local, batch_size=4, decode={"text": "tensor"})
    with pytest.raises(ConfigError, match=r"decode: expected one of \['pil', 'tensor'\], found 'numpy'"):
        StreamingDataset(local=local, batch_size=4, decode="numpy")


def test_decode_pil_stays_the_default(tmp_path: Path) -> None:
    dataset = StreamingDataset(local=str(_write(tmp_path)), batch_size=4)
    assert dataset.config.decode == "pil" and isinstance(dataset[0]["image"], Image.Image)


def test_zero_copy_values_equal_the_copying_read(tmp_path: Path) -> None:
    local = str(_write(tmp_path))
    copied = list(StreamingDataset(local=local, batch_size=4))
    viewed = list(StreamingDataset(local=local, batch_size=4, zero_copy=True))
    assert [type(sample["data"]) for sample in viewed] == [memoryview] * len(copied)
    assert [bytes(sample["data"]) for sample in viewed] == [sample["data"] for sample in copied]
    assert [sample["label"] for sample in viewed] == [sample["label"] for sample in copied]


def test_a_zero_copy_view_is_read_only(tmp_path: Path) -> None:
    view = StreamingDataset(local=str(_write(tmp_path)), batch_size=4, zero_copy=True)[2]["data"]
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1


def test_zero_copy_reaches_read_columns_too(tmp_path: Path) -> None:
    _write(tmp_path)
    entry = load_index(tmp_path / "index.json")[0]
    reader = open_shard(entry, tmp_path, read_options=ReadOptions(zero_copy=True))
    views = reader.read_columns([1, 0])["data"]
    assert [bytes(view) for view in views] == [_payload(1), _payload(0)]
    reader.close()


def test_a_view_stays_valid_after_its_reader_closes_and_its_file_is_evicted(tmp_path: Path) -> None:
    _write(tmp_path)
    entry = load_index(tmp_path / "index.json")[0]
    reader = open_shard(entry, tmp_path, read_options=ReadOptions(zero_copy=True))
    view = reader.read(1)["data"]
    reader.close()  # the shard leaves the open readers
    (tmp_path / entry.raw_data.basename).unlink()  # the cache evicts the file
    gc.collect()
    assert bytes(view) == _payload(1)  # the view kept the map alive
    with pytest.raises(ValueError, match="reader is closed"):
        reader.read(1)


def test_a_view_outlives_the_dataset(tmp_path: Path) -> None:
    dataset = StreamingDataset(local=str(_write(tmp_path)), batch_size=4, zero_copy=True)
    views = [sample["data"] for sample in dataset]
    del dataset
    gc.collect()
    assert [bytes(view) for view in views] == [_payload(index) for index in range(len(views))]


def test_zero_copy_must_be_a_bool_or_a_list_of_columns(tmp_path: Path) -> None:
    local = str(_write(tmp_path))
    with pytest.raises(ConfigTypeError, match=r"zero_copy: expected True, False or a list of bytes column names, found str 'yes'"):
        StreamingDataset(local=local, batch_size=4, zero_copy="yes")
    with pytest.raises(ConfigTypeError, match=r"zero_copy: expected str column names, found int 3"):
        StreamingDataset(local=local, batch_size=4, zero_copy=[3])  # type: ignore[list-item]


def test_zero_copy_of_named_columns_views_only_those(tmp_path: Path) -> None:
    columns = {"data": "bytes", "other": "bytes", "label": "int"}
    with MDSWriter(out=str(tmp_path), columns=columns, size_limit=1 << 11) as writer:
        for index in range(6):
            writer.write({"data": _payload(index), "other": _payload(index + 10), "label": index})
    samples = list(StreamingDataset(local=str(tmp_path), batch_size=2, zero_copy=["data"]))
    assert [type(sample["data"]) for sample in samples] == [memoryview] * 6
    assert [type(sample["other"]) for sample in samples] == [bytes] * 6
    assert [bytes(sample["data"]) for sample in samples] == [_payload(index) for index in range(6)]
    assert [sample["other"] for sample in samples] == [_payload(index + 10) for index in range(6)]


def test_zero_copy_columns_are_normalized_to_a_sorted_tuple() -> None:
    assert normalize_zero_copy(["b", "a", "b"]) == ("a", "b")
    assert normalize_zero_copy([]) is False and normalize_zero_copy(True) is True
    assert DatasetConfig(zero_copy=["b", "a"]).zero_copy == ("a", "b")
    assert DatasetConfig(zero_copy=["b", "a"]).read_options == ReadOptions(zero_copy=("a", "b"))
    with pytest.raises(ConfigError, match=r"ReadOptions.zero_copy: expected a normalized value, found \['a'\]"):
        ReadOptions(zero_copy=["a"])  # type: ignore[arg-type]


def test_zero_copy_refuses_a_column_the_dataset_lacks(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"zero_copy names column 'blob', expected one of the dataset's columns \['data', 'image', 'label', 'text'\]; fix the name"
    ):
        StreamingDataset(local=str(_write(tmp_path)), batch_size=4, zero_copy=["blob"])


def test_zero_copy_refuses_a_column_that_is_not_bytes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"zero_copy=\['text'\] expects a 'bytes' column .* found encoding 'str'; name a bytes column"):
        StreamingDataset(local=str(_write(tmp_path)), batch_size=4, zero_copy=["data", "text"])


def test_image_columns_read_with_zero_copy_still_decode(tmp_path: Path) -> None:
    sample = StreamingDataset(local=str(_write(tmp_path)), batch_size=4, zero_copy=True)[5]
    assert np.asarray(Image.open(io.BytesIO(_png(5)))).tolist() == np.asarray(sample["image"]).tolist()


def _png(value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((4, 6, 3), value, np.uint8), "RGB").save(out, format="PNG")
    return out.getvalue()
