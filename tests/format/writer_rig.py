"""Helpers shared by the writer tests: write small datasets, read them back, compare with the fixtures."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path
from typing import Any

import zstandard

from stream_plugin.format.index import FileInfo, ShardEntry, load_index
from stream_plugin.format.reader import materialize_shard, open_shard
from stream_plugin.format.writer import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter

WRITERS: dict[str, Any] = {"mds": MDSWriter, "json": JSONWriter, "csv": CSVWriter, "tsv": TSVWriter}
TEXT_COLUMNS = {"n": "int", "word": "str", "x": "float"}
MDS_COLUMNS = {"n": "int", "word": "str", "x": "str_float"}


def text_samples(count: int) -> list[dict[str, Any]]:
    return [{"n": i, "word": f"w{i}-{'é' * (i % 3)}", "x": i / 7} for i in range(count)]


def make_writer(fmt: str, out: Any, columns: dict[str, str], **kwargs: Any) -> Any:
    """A writer of ``fmt``; the text columns of ``text_samples`` become their MDS equivalents for MDS."""
    if fmt == "mds" and columns == TEXT_COLUMNS:
        columns = MDS_COLUMNS
    if fmt == "xsv":
        return XSVWriter(columns=columns, separator="|", out=out, **kwargs)
    return WRITERS[fmt](columns=columns, out=out, **kwargs)


def write_dataset(
    fmt: str, out: Any, samples: list[dict[str, Any]], columns: dict[str, str], **kwargs: Any
) -> None:
    with make_writer(fmt, out, columns, **kwargs) as writer:
        for sample in samples:
            writer.write(sample)


def read_dataset(folder: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """Every sample of a local dataset, decompressing shards in place as needed."""
    samples = []
    for entry in load_index(folder):
        materialize_shard(entry, folder, validate_hash=True)
        reader = open_shard(entry, folder, **kwargs)
        try:
            samples.extend(reader.read_many(range(reader.num_samples)))
        finally:
            reader.close()
    return samples


def raw_files(entry: ShardEntry) -> list[FileInfo]:
    return [raw for raw, _ in entry.file_pairs()]


def stored_files(entry: ShardEntry) -> list[FileInfo]:
    return [zipped or raw for raw, zipped in entry.file_pairs()]


def without_zip(entry: ShardEntry) -> dict[str, Any]:
    """An index entry without the compressed-file descriptions, which depend on codec builds."""
    return {key: value for key, value in entry.config.items() if key not in ("zip_data", "zip_meta")}


def assert_same_compressed(family: str, mine: bytes, theirs: bytes) -> None:
    """Compressed bytes equal MosaicML's, up to the known codec-setting differences.

    gz: MosaicML stamps the clock into the header (bytes 4..8) and OS 255 (byte 9), we write mtime 0 and
    the OS zlib picks; the deflate stream after the 10-byte header is the same. zstd: our frames carry
    a content checksum (4 bytes at the end, a flag in header byte 4), MosaicML's do not; everything
    else, the compressed blocks included, is the same.
    """
    if family == "gz":
        assert mine[:4] + mine[8:9] + mine[10:] == theirs[:4] + theirs[8:9] + theirs[10:]
        assert gzip.decompress(mine) == gzip.decompress(theirs)
    elif family == "zstd":
        decompressor = zstandard.ZstdDecompressor()
        assert decompressor.decompress(mine) == decompressor.decompress(theirs)
        assert mine[:4] == theirs[:4] and mine[5:-4] == theirs[5:]
    elif family == "bz2":
        assert mine == theirs and bz2.decompress(mine)
    else:
        assert mine == theirs
