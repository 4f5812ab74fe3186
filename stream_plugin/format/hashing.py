"""Shard hashes (spec section 7): the algorithms index.json may name, and checking files against them.

Stored values are hex digests, as MosaicML Streaming 0.13 writes them. The xxhash family needs the
optional ``xxhash`` package; the rest come from ``hashlib``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stream_plugin.errors import ConfigError, MissingDependencyError, ShardIntegrityError

__all__ = ["check_hash_names", "hash_data", "hash_file", "hash_names", "verify_digests"]

Buffer = bytes | memoryview

_HASHLIB_NAMES = (
    "md5",
    "sha1",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "sha3_224",
    "sha3_256",
    "sha3_384",
    "sha3_512",
    "blake2b",
    "blake2s",
)
# Our name -> xxhash constructor name (xxh3_128 and xxh128 are the same algorithm).
_XXHASH_NAMES = {
    "xxh32": "xxh32",
    "xxh64": "xxh64",
    "xxh3_64": "xxh3_64",
    "xxh3_128": "xxh3_128",
    "xxh128": "xxh128",
}
_CHUNK = 1 << 20


def hash_names() -> list[str]:
    """Every algorithm name index.json may use, whether or not its optional package is installed."""
    return [*_HASHLIB_NAMES, *_XXHASH_NAMES]


def _xxhash_module() -> Any:
    try:
        import xxhash
    except ImportError as exc:
        raise MissingDependencyError(
            f"the xxh* hash algorithms need the 'xxhash' package, found it is not importable ({exc}); install it with: pip install 'stream-plugin[xxhash]'"
        ) from exc
    return xxhash


def _hasher_factory(name: str) -> Callable[[], Any]:
    """Return a constructor of incremental hash objects (``update`` / ``hexdigest``)."""
    if name in _HASHLIB_NAMES:
        return getattr(hashlib, name)
    if name in _XXHASH_NAMES:
        return getattr(_xxhash_module(), _XXHASH_NAMES[name])
    raise ConfigError(f"expected a hash algorithm in {hash_names()}, found {name!r}; use one of those names")


def check_hash_names(names: Sequence[str] | None) -> list[str]:
    """Validate the ``hashes`` a writer will compute; None means none."""
    if names is None:
        return []
    if isinstance(names, str):
        raise ConfigError(
            f"expected a list of hash algorithm names, found the string {names!r}; wrap it in a list: [{names!r}]"
        )
    for name in names:
        _hasher_factory(name)
    return list(names)


def hash_data(name: str, data: Buffer) -> str:
    """Hex digest of ``data``."""
    hasher = _hasher_factory(name)()
    hasher.update(data)
    return hasher.hexdigest()


def _hash_file_many(names: Sequence[str], path: str | os.PathLike[str]) -> dict[str, str]:
    """Hex digests of one file for several algorithms, reading it once in chunks."""
    hashers = {name: _hasher_factory(name)() for name in names}
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            for hasher in hashers.values():
                hasher.update(chunk)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def hash_file(name: str, path: str | os.PathLike[str]) -> str:
    """Hex digest of a file, streamed so that memory stays flat."""
    return _hash_file_many([name], path)[name]


def _is_available(name: str) -> bool:
    if name in _HASHLIB_NAMES:
        return True
    if name not in _XXHASH_NAMES:
        return False
    try:
        _xxhash_module()
    except MissingDependencyError:
        return False
    return True


def verify_digests(
    expected: Mapping[str, str],
    path: str | os.PathLike[str],
    *,
    source: str,
    names: Sequence[str] | None = None,
) -> None:
    """Check a file against index.json digests; by default every listed algorithm that can run here.

    Algorithms this package does not know (or whose package is missing) are skipped by default, so a
    dataset written with an exotic hash still opens; naming them in ``names`` makes them required.
    """
    if names is None:
        names = [name for name in expected if _is_available(name)]
    else:
        missing = [name for name in names if name not in expected]
        if missing:
            raise ConfigError(
                f"{source}: expected index.json to record digests for {list(names)}, found only {sorted(expected)}; ask for algorithms the dataset was written with, or re-write it with hashes={list(names)}"
            )
    found = _hash_file_many(names, path)
    for name in names:
        if found[name].lower() != expected[name].lower():
            raise ShardIntegrityError(
                f"{source}: expected {name} digest {expected[name]} (from index.json), found {found[name]}; delete the local copy and download it again, and if the mismatch persists the remote copy is corrupt and the shard must be re-written"
            )
