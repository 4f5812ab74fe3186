"""Each sample's tokens, decoded once per process and kept while its shard's reader stays open.

A token block reads parts of one to a few samples. Decoding a sample (the shard's compiled read, the
``ndarray`` header, the column lookup) costs several times more than slicing the tokens it holds, and
consecutive blocks read the same samples again (every block shares its last sample with the next).
``TokenViews`` keeps, per open shard, the token array of every sample already read: for an ``ndarray``
column a read-only view of the shard's memory map (no copy), for ``bytes`` or ``json`` columns the
decoded array. A block is then a few slices of these arrays and one copy into the block.

Where the token column is an MDS shard's last column, stored as an ``ndarray`` of a fixed int dtype or
as ``bytes``, each sample ends with its raw tokens, and the caller knows how many there are (the
counted tokens): the first read of a sample is then a view of its tail (``tail_dtype``), without
decoding the sample. The first such read of each shard is checked against the decoded sample.

The arrays of a shard are dropped when this process opens a new reader of it, and when more shards
than ``capacity`` are kept (least recently used first), so the maps they point into are released
about when the shard access closes its readers (``ShardAccess.max_open``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from stream_plugin.format.index import ShardEntry
from stream_plugin.format.reader import ShardReader
from stream_plugin.text.token_counts import sample_tokens


class TokenViews:
    """``tokens(reader, shard, index)``: the 1-D token array of sample ``index`` of shard ``shard``, open
    in ``reader`` (the shard access's current reader of it)."""

    def __init__(self, column: str, token_encoding_type: str) -> None:
        self._column = column
        self._token_encoding_type = token_encoding_type
        # Shards kept at most: the process's ``ShardAccess.max_open``, known once the process reads
        # (a DataLoader worker's access keeps fewer readers than the main process's would).
        self.capacity: int | None = None
        # shard id -> (the reader the arrays come from, per sample: its tokens once read, else None,
        # the tail dtype where samples end with their tokens)
        self._shards: OrderedDict[int, tuple[ShardReader, list[np.ndarray | None], np.dtype[Any] | None]] = (
            OrderedDict()
        )

    def tokens(self, reader: ShardReader, shard: int, index: int, count: int) -> np.ndarray:
        """The ``count`` tokens of sample ``index`` (``count`` > 0, as counted for the sample)."""
        found = self._shards.get(shard)
        if found is None or found[0] is not reader:
            found = (reader, [None] * reader.num_samples, self._checked_tail(reader, index))
            self._shards[shard] = found
            if len(self._shards) > (self.capacity or 1):
                self._shards.popitem(last=False)
        samples, tail = found[1], found[2]
        tokens = samples[index]
        if tokens is None:
            if tail is not None:
                raw = reader.raw_sample(index)
                tokens = np.frombuffer(raw, tail, count, len(raw) - count * tail.itemsize)
            else:
                tokens = sample_tokens(reader.read(index), self._column, self._token_encoding_type)
            samples[index] = tokens
        return tokens

    def _checked_tail(self, reader: ShardReader, index: int) -> np.dtype[Any] | None:
        """``tail_dtype`` of the shard, if reading sample ``index``'s tail gives its decoded tokens."""
        dtype = tail_dtype(reader.entry, self._column, self._token_encoding_type)
        if dtype is None:
            return None
        decoded = sample_tokens(reader.read(index), self._column, self._token_encoding_type)
        raw = reader.raw_sample(index)
        size = decoded.size * dtype.itemsize
        if size > len(raw) or not np.array_equal(
            np.frombuffer(raw, dtype, decoded.size, len(raw) - size), decoded
        ):
            return None
        return dtype

    def clear(self) -> None:
        """Drop every kept array (their maps are released once no other array points into them)."""
        self._shards.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = OrderedDict()  # arrays of this process's maps never travel to another
        state["capacity"] = None
        return state


def tail_dtype(entry: ShardEntry, column: str, token_encoding_type: str) -> np.dtype[Any] | None:
    """The little-endian token dtype when every sample of the shard ends with ``column``'s raw tokens:
    an MDS shard whose last column is ``column``, an ``ndarray`` of a fixed int dtype or ``bytes``
    (of ``token_encoding_type``). Else None (the sample is decoded)."""
    names, encodings = entry.config.get("column_names"), entry.config.get("column_encodings")
    if entry.format != "mds" or not names or not encodings or names[-1] != column:
        return None
    encoding = str(encodings[-1])
    if encoding == "bytes":
        return np.dtype(token_encoding_type).newbyteorder("<")
    parts = encoding.split(":")
    if parts[0] != "ndarray" or len(parts) < 2:
        return None
    try:
        dtype = np.dtype(parts[1])
    except TypeError:
        return None
    return dtype.newbyteorder("<") if dtype.kind in "iu" else None


__all__ = ["TokenViews", "tail_dtype"]
