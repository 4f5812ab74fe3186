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
decoding the sample. The first such read of each shard is checked against the decoded sample. In a raw
MDS shard, whose samples are views of one mapped file, a token run is then one slice of that file
(``KeptShard.tail_of``), found from the shard's header of sample offsets, with no lookup per sample.

The arrays of a shard are dropped when this process opens a new reader of it, and when more shards
than ``capacity`` are kept (least recently used first), so the maps they point into are released
about when the shard access closes its readers (``ShardAccess.max_open``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, cast

import numpy as np

from stream_plugin.format.index import ShardEntry
from stream_plugin.format.reader import ShardReader
from stream_plugin.text.token_counts import sample_tokens


class KeptShard:
    """What ``TokenViews`` keeps of one open shard: its reader, each sample's tokens once read (else
    None), the tail dtype where samples end with their tokens, and, for an MDS shard with such a tail,
    the whole file as bytes with its sample offsets (``tail_of``)."""

    __slots__ = ("file", "offsets", "reader", "samples", "tail")

    def __init__(
        self,
        reader: ShardReader,
        tail: np.dtype[Any] | None,
        file: np.ndarray | None,
        offsets: list[int] | None,
    ) -> None:
        self.reader = reader
        self.samples: list[np.ndarray | None] = [None] * reader.num_samples
        self.tail = tail
        self.file = file  # (file bytes,) uint8: the map the raw samples are views of
        self.offsets = offsets  # (num_samples + 1,) each sample's first byte in it, then the end

    def tail_of(self, index: int, begin: int, end: int, count: int) -> np.ndarray:
        """Tokens ``[begin, end)`` of sample ``index`` (of ``count`` tokens) as a view of the file: one
        slice, no lookup (only where ``file`` is kept)."""
        assert self.file is not None and self.offsets is not None and self.tail is not None
        size = self.tail.itemsize
        stop = self.offsets[index + 1]
        return self.file[stop - (count - begin) * size : stop - (count - end) * size].view(self.tail)


class TokenViews:
    """``tokens(reader, shard, index)``: the 1-D token array of sample ``index`` of shard ``shard``, open
    in ``reader`` (the shard access's current reader of it)."""

    def __init__(self, column: str, token_encoding_type: str) -> None:
        self._column = column
        self._token_encoding_type = token_encoding_type
        # Shards kept at most: the process's ``ShardAccess.max_open``, known once the process reads
        # (a DataLoader worker's access keeps fewer readers than the main process's would).
        self.capacity: int | None = None
        self._shards: OrderedDict[int, KeptShard] = OrderedDict()  # shard id -> what is kept of it

    def tokens(self, reader: ShardReader, shard: int, index: int, count: int) -> np.ndarray:
        """The ``count`` tokens of sample ``index`` (``count`` > 0, as counted for the sample)."""
        kept = self.of_shard(reader, shard, index)
        tokens = kept.samples[index]
        return self.read(kept, index, count) if tokens is None else tokens

    def of_shard(self, reader: ShardReader, shard: int, index: int) -> KeptShard:
        """What is kept of shard ``shard`` open in ``reader``; on the shard's first read here (or a new
        reader of it), sample ``index`` checks its tail."""
        kept = self._shards.get(shard)
        if kept is None or kept.reader is not reader:
            kept = self._checked(reader, index)
            self._shards[shard] = kept
            if len(self._shards) > (self.capacity or 1):
                self._shards.popitem(last=False)
        return kept

    def read(self, kept: KeptShard, index: int, count: int) -> np.ndarray:
        """Read the ``count`` tokens of sample ``index`` of ``kept`` and keep them there."""
        tail = kept.tail
        if kept.file is not None:
            tokens = kept.tail_of(index, 0, count, count)
        elif tail is not None:
            raw = kept.reader.raw_sample(index)
            tokens = np.frombuffer(raw, tail, count, len(raw) - count * tail.itemsize)
        else:
            tokens = sample_tokens(kept.reader.read(index), self._column, self._token_encoding_type)
        kept.samples[index] = tokens
        return tokens

    def _checked(self, reader: ShardReader, index: int) -> KeptShard:
        """A ``KeptShard`` for ``reader``: with the ``tail_dtype`` if reading sample ``index``'s tail gives
        its decoded tokens, and with the whole file if reading it there does too."""
        dtype = tail_dtype(reader.entry, self._column, self._token_encoding_type)
        if dtype is None:
            return KeptShard(reader, None, None, None)
        decoded = sample_tokens(reader.read(index), self._column, self._token_encoding_type)
        raw = reader.raw_sample(index)
        size = decoded.size * dtype.itemsize
        if size > len(raw) or not np.array_equal(
            np.frombuffer(raw, dtype, decoded.size, len(raw) - size), decoded
        ):
            return KeptShard(reader, None, None, None)
        file, offsets = mds_file_of(reader)
        kept = KeptShard(reader, dtype, file, offsets)
        if file is not None and not np.array_equal(
            kept.tail_of(index, 0, decoded.size, decoded.size), decoded
        ):
            kept = KeptShard(reader, dtype, None, None)
        return kept

    def clear(self) -> None:
        """Drop every kept array (their maps are released once no other array points into them)."""
        self._shards.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = OrderedDict()  # arrays of this process's maps never travel to another
        state["capacity"] = None
        return state


def mds_file_of(reader: ShardReader) -> tuple[np.ndarray | None, list[int] | None]:
    """The whole raw MDS shard file that ``reader``'s raw samples are views of, as uint8, and its sample
    offsets (the header's ``uint32 N, uint32 O[0..N]``); ``(None, None)`` where the raw samples are not
    views of such a file (then samples are read one by one)."""
    if reader.entry.format != "mds" or not reader.num_samples:
        return None, None
    raw = reader.raw_sample(0)
    try:
        file = np.frombuffer(cast(Any, raw.obj), np.uint8)
    except (TypeError, ValueError):
        return None, None
    samples = reader.num_samples
    table_end = 4 + 4 * (samples + 1)
    if len(file) < table_end or int(file[:4].view("<u4")[0]) != samples:
        return None, None
    offsets: list[int] = file[4:table_end].view("<u4").tolist()
    first, stop = offsets[0], offsets[1]
    if stop > len(file) or stop - first != len(raw) or file[first:stop].tobytes() != raw.tobytes():
        return None, None
    return file, offsets


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


__all__ = ["KeptShard", "TokenViews", "mds_file_of", "tail_dtype"]
