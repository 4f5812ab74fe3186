"""What opening a stream keeps of each shard of its ``index.json`` (``IndexColumns``), and the usual
layout of that file, which both index scanners (``index_native``, ``index_columns``) look for."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

import numpy as np

from stream_plugin.format.index import ShardEntry

WS = "[ \t\n\r]*"  # JSON whitespace, and nothing else
# The usual layout: ``{"shards": [...], "version": 2}`` in either key order. Each pattern is a ``re``
# source that matches the same text as ``str`` or as UTF-8 ``bytes``.
HEAD_SHARDS_FIRST = f'{WS}\\{{{WS}"shards"{WS}:{WS}\\[{WS}'
HEAD_VERSION_FIRST = f'{WS}\\{{{WS}"version"{WS}:{WS}2{WS},{WS}"shards"{WS}:{WS}\\[{WS}'
TAIL_SHARDS_FIRST = f'\\]{WS},{WS}"version"{WS}:{WS}2{WS}\\}}{WS}'
TAIL_VERSION_FIRST = f"\\]{WS}\\}}{WS}"
AFTER_ENTRY = f"{WS}(?:,{WS}|(\\]))"  # between two entries, or (group 1) the list's closing bracket
TAIL_CHARS = 256  # the tail patterns match within the last characters of the text
# Basenames ``check_basename`` accepts without a closer look: relative, each component starting with
# one of BASENAME_FIRST (so never '.' or '..') and going on with BASENAME_REST.
BASENAME_FIRST = string.ascii_letters + string.digits + "_"
BASENAME_REST = BASENAME_FIRST + ".+=@,-"
_COMPONENT = f"[{re.escape(BASENAME_FIRST)}][{re.escape(BASENAME_REST)}]*"
PLAIN_BASENAME = f"{_COMPONENT}(?:/{_COMPONENT})*"


@dataclass(frozen=True)
class IndexColumns:
    """What opening a stream needs of every shard, one array element per shard (in index order)."""

    samples: np.ndarray  # int64 (num_shards,)
    stored_bytes: np.ndarray  # int64 (num_shards,): raw + compressed bytes of the shard's files
    spans: np.ndarray | None  # int64 (num_shards, 2): byte range of each entry in the index text
    kind_per_shard: np.ndarray  # int64 (num_shards,): id of the shard's (format, column encodings)
    first_of_kind: np.ndarray  # int64 (num_kinds,): the first shard of each kind

    @property
    def num_shards(self) -> int:
        return len(self.samples)


def stored_bytes(entry: ShardEntry) -> int:
    """Bytes a fully cached shard may occupy: while decompressed both files exist (raw + compressed)."""
    return sum(raw.bytes + (zipped.bytes if zipped else 0) for raw, zipped in entry.file_pairs())


__all__ = [
    "AFTER_ENTRY",
    "BASENAME_FIRST",
    "BASENAME_REST",
    "HEAD_SHARDS_FIRST",
    "HEAD_VERSION_FIRST",
    "PLAIN_BASENAME",
    "TAIL_CHARS",
    "TAIL_SHARDS_FIRST",
    "TAIL_VERSION_FIRST",
    "WS",
    "IndexColumns",
    "stored_bytes",
]
