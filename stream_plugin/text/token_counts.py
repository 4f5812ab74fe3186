"""How many tokens each sample of a stream holds: counted once per node, then read from the cache folder.

The MDS index lists samples per shard, not tokens, and an ``ndarray`` column's per-sample header size
depends on the array's length, so token counts cannot be derived from the index alone. They are counted
from the shards (one pass, through the node's shard cache, so each shard is downloaded once per node
and stays cached for the reading that follows) and saved under the stream's ``local`` folder, keyed by
the index's identity, the column and the token dtype. One process per node counts while the others
wait on a file lock, then load the saved array.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from stream_plugin.cache.locks import CONTROL_DIRNAME, locked
from stream_plugin.errors import ConfigError
from stream_plugin.reading.shard_access import ShardAccess
from stream_plugin.text.samples import decode_token_bytes


def sample_tokens(sample: Mapping[str, Any], column: str, token_encoding_type: str) -> np.ndarray:
    """The 1-D token array of ``sample[column]`` (``bytes`` decoded with ``token_encoding_type``)."""
    try:
        value = sample[column]
    except KeyError:
        raise ConfigError(
            f"column: expected a token column {column!r} in every sample, found columns {sorted(sample)}; "
            "pass column= naming the column that holds the tokens"
        ) from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_token_bytes(bytes(value), token_encoding_type)
    tokens = np.asarray(value)
    if tokens.dtype.kind not in "iu":
        raise ConfigError(
            f"column {column!r}: expected integer tokens (an int ndarray, a list of ints or bytes), found "
            f"dtype {tokens.dtype}; write the token ids, or name another column"
        )
    return tokens.reshape(-1)


def count_tokens(
    access: ShardAccess, shard_ids: Sequence[int], column: str, token_encoding_type: str
) -> np.ndarray:
    """Tokens per sample of the shards ``shard_ids`` (global ids, stored order): ``(samples,)`` int64."""
    counts: list[np.ndarray] = []
    with access.prefetch(np.asarray(shard_ids, np.int64), predownload=None) as prefetcher:
        for position, shard_id in enumerate(shard_ids):
            prefetcher.advance(position)
            reader = access.reader(shard_id)
            counts.append(
                np.fromiter(
                    (
                        sample_tokens(reader.read(index), column, token_encoding_type).size
                        for index in range(reader.num_samples)
                    ),
                    np.int64,
                    reader.num_samples,
                )
            )
            access.release(shard_id)  # an open reader pins its shard against eviction
    return np.concatenate(counts) if counts else np.zeros(0, np.int64)


def counts_path(local: str, index_digest: str, column: str, token_encoding_type: str) -> Path:
    """Where a node keeps one stream's token counts: under the cache's control folder of ``local``."""
    key = hashlib.sha256(f"{index_digest}\0{column}\0{token_encoding_type}".encode()).hexdigest()[:24]
    return Path(local) / CONTROL_DIRNAME / "token-counts" / f"{key}.npy"


def cached_counts(path: Path, count: Callable[[], np.ndarray]) -> np.ndarray:
    """The array saved at ``path``, or ``count()`` saved there first (one counter per node at a time).

    A folder that cannot be written (a read-only local dataset) only costs counting in every process.
    """
    with ExitStack() as stack:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(locked(path.with_suffix(".lock")))
        except OSError:
            return count()
        if path.is_file():
            return np.load(path)
        counts = count()
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as file:
            np.save(file, counts)
        os.replace(temporary, path)
        return counts
