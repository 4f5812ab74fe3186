"""``get_config()`` on every writer: MosaicML 0.13's public method, with its keys and values.

The expected dictionaries are MosaicML 0.13's (``streaming/base/format/*/writer.py``): the base keys,
plus ``column_names``/``column_encodings``/``column_sizes`` for MDS, ``columns``/``newline`` for JSON,
``column_names``/``column_encodings``/``newline`` for CSV and TSV and, for XSV only, ``separator``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stream_plugin.format.index import INDEX_BASENAME
from stream_plugin.format.writer import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter

COLUMNS = {"word": "str", "n": "int", "x": "float"}
MDS_COLUMNS = {"word": "str", "n": "int", "blob": "bytes", "v": "uint32"}

BASE = {"version": 2, "compression": None, "hashes": [], "size_limit": 1 << 26}


def test_mds_writer_get_config_has_mosaicmls_keys_and_values(tmp_path: Path) -> None:
    writer = MDSWriter(out=str(tmp_path), columns=MDS_COLUMNS, size_limit=32)
    assert writer.get_config() == {
        **BASE,
        "format": "mds",
        "size_limit": 32,
        "column_names": ["blob", "n", "v", "word"],
        "column_encodings": ["bytes", "int", "uint32", "str"],
        "column_sizes": [None, 8, 4, None],
    }
    writer.finish()


def test_json_writer_get_config_has_mosaicmls_keys_and_values(tmp_path: Path) -> None:
    writer = JSONWriter(out=str(tmp_path), columns=COLUMNS, newline="\r\n")
    assert writer.get_config() == {**BASE, "format": "json", "columns": COLUMNS, "newline": "\r\n"}
    writer.finish()


@pytest.mark.parametrize(("writer_class", "fmt"), [(CSVWriter, "csv"), (TSVWriter, "tsv")])
def test_csv_and_tsv_writers_get_config_has_no_separator(
    writer_class: type[CSVWriter], fmt: str, tmp_path: Path
) -> None:
    writer = writer_class(out=str(tmp_path), columns=COLUMNS)
    assert writer.get_config() == {
        **BASE,
        "format": fmt,
        "column_names": ["n", "word", "x"],
        "column_encodings": ["int", "str", "float"],
        "newline": "\n",
    }
    writer.finish()


def test_xsv_writer_get_config_has_the_separator(tmp_path: Path) -> None:
    writer = XSVWriter(
        out=str(tmp_path), columns=COLUMNS, separator="|", compression="zstd:7", hashes=["sha1", "xxh64"]
    )
    assert writer.get_config() == {
        **BASE,
        "format": "xsv",
        "compression": "zstd:7",
        "hashes": ["sha1", "xxh64"],
        "column_names": ["n", "word", "x"],
        "column_encodings": ["int", "str", "float"],
        "separator": "|",
        "newline": "\n",
    }
    writer.finish()


@pytest.mark.parametrize("writer_class", [MDSWriter, JSONWriter, CSVWriter, TSVWriter])
def test_get_config_is_what_every_shard_entry_of_the_index_repeats(writer_class: Any, tmp_path: Path) -> None:
    columns = {"word": "str", "n": "int"}
    with writer_class(out=str(tmp_path), columns=columns, size_limit=200, hashes=["sha1"]) as writer:
        for n in range(40):
            writer.write({"word": f"w{n}", "n": n})
        config = writer.get_config()
    shards = json.loads((tmp_path / INDEX_BASENAME).read_text())["shards"]
    assert len(shards) > 1
    file_keys = ("samples", "raw_data", "zip_data", "raw_meta", "zip_meta")
    assert all({k: v for k, v in shard.items() if k not in file_keys} == config for shard in shards)


def test_get_config_returns_a_copy_that_cannot_change_the_writer(tmp_path: Path) -> None:
    writer = MDSWriter(out=str(tmp_path), columns=MDS_COLUMNS)
    config = writer.get_config()
    config["column_names"].append("extra")
    config["size_limit"] = 1
    assert writer.get_config()["column_names"] == ["blob", "n", "v", "word"]
    assert writer.get_config()["size_limit"] == 1 << 26
    writer.finish()
