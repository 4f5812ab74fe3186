"""hf_dataset_to_mds: Features to encodings, in-memory / saved / load_dataset inputs, overrides, refusals."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from readback import read_all

from stream_plugin.cli import main
from stream_plugin.converters import hf_dataset_to_mds
from stream_plugin.errors import ConfigError

datasets = pytest.importorskip("datasets", reason="the [hf] extra is installed by ./scripts/test")
Image = pytest.importorskip("PIL.Image")


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and no shared cache: everything is built here."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


FEATURES = {
    "i8": datasets.Value("int8"),
    "u32": datasets.Value("uint32"),
    "i64": datasets.Value("int64"),
    "f16": datasets.Value("float16"),
    "f64": datasets.Value("float64"),
    "text": datasets.Value("string"),
    "blob": datasets.Value("binary"),
    "flag": datasets.Value("bool"),
    "label": datasets.ClassLabel(names=["cat", "dog"]),
    "tokens": datasets.Sequence(datasets.Value("int32")),
    "grid": datasets.Array2D(shape=(2, 3), dtype="float32"),
    "cube": datasets.Array3D(shape=(1, 2, 2), dtype="uint8"),
    "image": datasets.Image(),
    "meta": {"source": datasets.Value("string"), "score": datasets.Value("float32")},
    "words": datasets.Sequence(datasets.Value("string")),
}
ENCODINGS = {
    "i8": "int8",
    "u32": "uint32",
    "i64": "int64",
    "f16": "float16",
    "f64": "float64",
    "text": "str",
    "blob": "bytes",
    "flag": "json",
    "label": "int64",
    "tokens": "ndarray:int32",
    "grid": "ndarray:float32:2,3",
    "cube": "ndarray:uint8:1,2,2",
    "image": "png",
    "meta": "json",
    "words": "json",
}


def image(i: int) -> Any:
    return Image.fromarray(np.full((4, 5, 3), i, dtype=np.uint8))


def row(i: int) -> dict[str, Any]:
    return {
        "i8": -i,
        "u32": i * 1000,
        "i64": i * 10**12,
        "f16": i / 2,
        "f64": i / 3,
        "text": f"text {i}",
        "blob": bytes([i]) * 3,
        "flag": i % 2 == 0,
        "label": i % 2,
        "tokens": list(range(i + 1)),  # MDS ndarrays cannot be empty
        "grid": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
        "cube": np.full((1, 2, 2), i, dtype=np.uint8),
        "image": image(i),
        "meta": {"source": f"s{i}", "score": 0.5},
        "words": ["a"] * i,
    }


def every_feature(rows: int = 6) -> Any:
    return datasets.Dataset.from_list([row(i) for i in range(rows)], features=datasets.Features(FEATURES))


def test_every_feature_is_written_with_its_encoding(tmp_path: Path) -> None:
    assert hf_dataset_to_mds(every_feature(), str(tmp_path / "out"), progress=False) == 6
    shard = json.loads((tmp_path / "out" / "index.json").read_text())["shards"][0]
    assert dict(zip(shard["column_names"], shard["column_encodings"])) == ENCODINGS
    for i, sample in enumerate(read_all(tmp_path / "out")):
        expected = row(i)
        for name in ("i8", "u32", "i64", "f16", "f64", "text", "blob", "flag", "label", "meta", "words"):
            assert sample[name] == expected[name], name
        assert sample["tokens"].dtype == np.int32 and sample["tokens"].tolist() == expected["tokens"]
        np.testing.assert_array_equal(sample["grid"], expected["grid"])
        np.testing.assert_array_equal(sample["cube"], expected["cube"])
        np.testing.assert_array_equal(np.asarray(sample["image"]), np.asarray(expected["image"]))


def test_saved_dataset_converts_from_its_folder(tmp_path: Path) -> None:
    every_feature().save_to_disk(str(tmp_path / "saved"))
    hf_dataset_to_mds(tmp_path / "saved", str(tmp_path / "out"), progress=False, compression="zstd")
    assert [sample["text"] for sample in read_all(tmp_path / "out")] == [f"text {i}" for i in range(6)]


@pytest.mark.parametrize("kind", ["parquet", "json", "csv"])
def test_load_dataset_from_local_files_converts(tmp_path: Path, kind: str) -> None:
    plain = datasets.Dataset.from_dict({"n": list(range(5)), "word": [f"w{i}" for i in range(5)]})
    path = tmp_path / f"rows.{kind}"
    getattr(plain, f"to_{kind}")(str(path))
    loaded = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "c"))
    hf_dataset_to_mds(loaded, str(tmp_path / "out"), progress=False)
    assert read_all(tmp_path / "out") == [{"n": i, "word": f"w{i}"} for i in range(5)]


def test_user_columns_override_the_inferred_ones(tmp_path: Path) -> None:
    hf_dataset_to_mds(
        every_feature(), str(tmp_path / "out"), columns={"text": "str", "i64": "int"}, progress=False
    )
    assert read_all(tmp_path / "out")[2] == {"text": "text 2", "i64": 2 * 10**12}
    with pytest.raises(ConfigError, match=r"columns names \['nope'\], expected columns of the dataset"):
        hf_dataset_to_mds(every_feature(), str(tmp_path / "bad"), columns={"nope": "str"}, progress=False)


def test_unsupported_feature_and_dataset_dict_are_refused(tmp_path: Path) -> None:
    dated = datasets.Dataset.from_dict(
        {"when": [datetime.date(2024, 1, 1)]}, features=datasets.Features({"when": datasets.Value("date32")})
    )
    with pytest.raises(ConfigError, match=r"column 'when': expected a feature with an MDS encoding.*date32"):
        hf_dataset_to_mds(dated, str(tmp_path / "a"), progress=False)
    splits = datasets.DatasetDict({"train": every_feature(1), "test": every_feature(1)})
    with pytest.raises(
        ConfigError, match=r"found a DatasetDict with splits \['test', 'train'\]; pass dataset\['train'\]"
    ):
        hf_dataset_to_mds(splits, str(tmp_path / "b"), progress=False)
    with pytest.raises(ConfigError, match=r"expected a folder written by Dataset.save_to_disk"):
        hf_dataset_to_mds(tmp_path, str(tmp_path / "c"), progress=False)


def test_cli_convert_of_a_saved_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    every_feature().save_to_disk(str(tmp_path / "saved"))
    assert main(["convert", str(tmp_path / "saved"), str(tmp_path / "out"), "--no-progress"]) == 0
    assert "wrote 6 samples" in capsys.readouterr().out
    assert [sample["label"] for sample in read_all(tmp_path / "out")] == [0, 1, 0, 1, 0, 1]
