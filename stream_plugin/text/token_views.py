"""Each sample's tokens, decoded once per process and kept while its shard's reader stays open.

A token block reads parts of one to a few samples. Decoding a sample (the shard's compiled read, the
``ndarray`` header, the column lookup) costs several times more than slicing the tokens it holds, and
consecutive blocks read the same samples again (every block shares its last sample with the next).
``TokenViews`` keeps, per open shard, the token array of every sample already read: for an ``ndarray``
column a read-only view of the shard's memory map (no copy), for ``bytes`` or ``json`` columns the
decoded array. A block is then a few slices of these arrays and one copy into the block.

The arrays of a shard are dropped when this process opens a new reader of it, and when more shards
than ``capacity`` are kept (least recently used first), so the maps they point into are released
about when the shard access closes its readers (``ShardAccess.max_open``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from stream_plugin.format.reader import ShardReader
from stream_plugin.text.token_counts import sample_tokens


class TokenViews:
    """``tokens(reader, shard, index)``: the 1-D token array of sample ``index`` of shard ``shard``, open
    in ``reader`` (the shard access's current reader of it)."""

    def __init__(self, column: str, token_encoding_type: str, capacity: int) -> None:
        self._column = column
        self._token_encoding_type = token_encoding_type
        self._capacity = max(1, int(capacity))
        # shard id -> (the reader the arrays come from, per sample: its tokens once read, else None)
        self._shards: OrderedDict[int, tuple[ShardReader, list[np.ndarray | None]]] = OrderedDict()

    def tokens(self, reader: ShardReader, shard: int, index: int) -> np.ndarray:
        found = self._shards.get(shard)
        if found is None or found[0] is not reader:
            found = (reader, [None] * reader.num_samples)
            self._shards[shard] = found
            if len(self._shards) > self._capacity:
                self._shards.popitem(last=False)
        samples = found[1]
        tokens = samples[index]
        if tokens is None:
            tokens = sample_tokens(reader.read(index), self._column, self._token_encoding_type)
            samples[index] = tokens
        return tokens

    def clear(self) -> None:
        """Drop every kept array (their maps are released once no other array points into them)."""
        self._shards.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_shards"] = OrderedDict()  # arrays of this process's maps never travel to another
        return state


__all__ = ["TokenViews"]
