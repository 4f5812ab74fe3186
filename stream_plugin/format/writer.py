"""The dataset writers: same arguments, files and index as MosaicML Streaming 0.13's writers.

``MDSWriter`` writes MDS shards; ``JSONWriter`` JSON-lines; ``CSVWriter``, ``TSVWriter`` and
``XSVWriter`` unquoted delimited text. Use them as context managers::

    with MDSWriter(out="data/train", columns={"text": "str", "label": "int"}) as writer:
        for sample in samples:
            writer.write(sample)

Differences from MosaicML (see ``writer_base``): an exception inside the ``with`` block writes no
index.json, and a first sample larger than ``size_limit`` does not produce an empty shard in front of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stream_plugin.format import mds
from stream_plugin.format.jsonl import check_json_columns, make_json_encoder
from stream_plugin.format.shard_file import build_meta
from stream_plugin.format.writer_base import OutputExistsError, ShardWriter
from stream_plugin.format.xsv import check_xsv_columns, header_line, make_xsv_encoder

__all__ = ["CSVWriter", "JSONWriter", "MDSWriter", "OutputExistsError", "TSVWriter", "XSVWriter"]


class MDSWriter(ShardWriter):
    """Writes MDS shards; ``columns`` maps column names to MDS encodings (``'str'``, ``'ndarray:uint8'``, ...)."""

    format = "mds"
    extra_bytes_per_sample = 4

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        out: str | tuple[str, str],
        compression: str | None = None,
        hashes: list[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        **kwargs: Any,
    ) -> None:
        layout = mds.columns_for_writer(columns)
        super().__init__(out=out, compression=compression, hashes=hashes, size_limit=size_limit, **kwargs)
        self.columns = dict(columns)
        self._init_format(layout.config(), mds.make_sample_encoder(layout))

    def shard_overhead(self) -> int:
        return mds.shard_overhead(self._config_bytes)

    def build_files(self, samples: list[bytes]) -> list[tuple[str, bytes]]:
        return [("data", mds.build_shard(samples, self._config_bytes))]


class JSONWriter(ShardWriter):
    """Writes JSON-lines shards; ``columns`` maps names to ``'str'``, ``'int'`` or ``'float'``."""

    format = "json"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        out: str | tuple[str, str],
        compression: str | None = None,
        hashes: list[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        newline: str = "\n",
        **kwargs: Any,
    ) -> None:
        self.columns = check_json_columns(columns)
        super().__init__(out=out, compression=compression, hashes=hashes, size_limit=size_limit, **kwargs)
        self.newline = newline
        self._init_format(
            {"columns": self.columns, "newline": newline}, make_json_encoder(self.columns, newline)
        )

    def build_files(self, samples: list[bytes]) -> list[tuple[str, bytes]]:
        return [("data", b"".join(samples)), ("meta", build_meta(0, samples, self._config_bytes))]


class XSVWriter(ShardWriter):
    """Writes delimited text shards with any ``separator``; values may not contain it or the newline."""

    format = "xsv"

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        separator: str,
        out: str | tuple[str, str],
        compression: str | None = None,
        hashes: list[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        newline: str = "\n",
        **kwargs: Any,
    ) -> None:
        writer = type(self).__name__
        names, types = check_xsv_columns(columns, separator=separator, newline=newline, writer=writer)
        super().__init__(out=out, compression=compression, hashes=hashes, size_limit=size_limit, **kwargs)
        self.columns = dict(columns)
        self.separator = separator
        self.newline = newline
        config: dict[str, Any] = {
            "column_names": list(names),
            "column_encodings": list(types),
            "newline": newline,
        }
        if self.format == "xsv":
            config["separator"] = separator
        encoder = make_xsv_encoder(names, types, separator=separator, newline=newline, writer=writer)
        self._init_format(config, encoder)
        self._header = header_line(names, separator, newline)

    def build_files(self, samples: list[bytes]) -> list[tuple[str, bytes]]:
        data = b"".join([self._header, *samples])
        return [("data", data), ("meta", build_meta(len(self._header), samples, self._config_bytes))]


class CSVWriter(XSVWriter):
    """Writes comma-separated shards (format ``csv``)."""

    format = "csv"

    def __init__(self, *, columns: Mapping[str, str], out: str | tuple[str, str], **kwargs: Any) -> None:
        super().__init__(columns=columns, separator=",", out=out, **kwargs)


class TSVWriter(XSVWriter):
    """Writes tab-separated shards (format ``tsv``)."""

    format = "tsv"

    def __init__(self, *, columns: Mapping[str, str], out: str | tuple[str, str], **kwargs: Any) -> None:
        super().__init__(columns=columns, separator="\t", out=out, **kwargs)
