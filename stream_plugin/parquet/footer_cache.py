"""The footers of the files a process read last, so that the next shard of a file does not fetch its
footer again.

A shard's download needs its file's footer (to find the column chunks, and to write it after them). The
shards of one file share that footer: kept here, the second shard of a file costs one request fewer.
The cache holds the footers' bytes (parsed again for each shard: a parse costs CPU, a GET costs a
request against the store's rate limit) and is bounded by those bytes, dropping the least recently
used file first. A footer is found only under the size and identity the store just reported for its
file, so a rewritten file never gets an old footer. Two downloads of one file's shards at once fetch
its footer once: the second waits for the first's (``fetch``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_FOOTER_CACHE_BYTES = 16 * 1024 * 1024  # the footers of many files, or of a few very wide ones


@dataclass(frozen=True)
class FooterKey:
    """One version of one file: where it is, and the size and identity the store gave for it."""

    source: str
    file: str
    size: int
    identity: str | None


class FooterCache:
    """The footers of the files read last, at most ``max_bytes`` of them in all (thread-safe)."""

    def __init__(self, max_bytes: int = DEFAULT_FOOTER_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes: expected a number of bytes >= 0, found {max_bytes}; pass 0 to keep none")
        self.max_bytes = max_bytes
        self._footers: OrderedDict[FooterKey, bytes] = OrderedDict()
        self._bytes = 0
        self._mutex = threading.Lock()
        self._fetching: dict[FooterKey, threading.Lock] = {}  # one lock per footer being fetched

    def __len__(self) -> int:
        return len(self._footers)

    @property
    def held_bytes(self) -> int:
        """The bytes of the footers held now (at most ``max_bytes``)."""
        return self._bytes

    def get(self, key: FooterKey) -> bytes | None:
        """The footer kept for ``key`` (now the most recently used), or None."""
        with self._mutex:
            found = self._footers.get(key)
            if found is not None:
                self._footers.move_to_end(key)
            return found

    def fetch(self, key: FooterKey, read: Callable[[], bytes]) -> bytes:
        """The footer kept for ``key``, else ``read()``'s (then kept); callers asking for one key at once
        wait for one ``read``. A failed ``read`` raises in its caller; the next caller reads again."""
        found = self.get(key)
        if found is not None:
            return found
        with self._mutex:
            lock = self._fetching.setdefault(key, threading.Lock())
        with lock:
            found = self.get(key)
            if found is None:
                try:
                    found = read()
                finally:
                    with self._mutex:
                        self._fetching.pop(key, None)
                self.put(key, found)
            return found

    def put(self, key: FooterKey, footer: bytes) -> None:
        """Keep ``footer``, dropping the least recently used ones past ``max_bytes``; a footer larger
        than ``max_bytes`` is not kept."""
        if len(footer) > self.max_bytes:
            return
        with self._mutex:
            previous = self._footers.pop(key, None)
            self._bytes -= 0 if previous is None else len(previous)
            self._footers[key] = footer
            self._bytes += len(footer)
            while self._bytes > self.max_bytes:
                _, dropped = self._footers.popitem(last=False)
                self._bytes -= len(dropped)


__all__ = ["DEFAULT_FOOTER_CACHE_BYTES", "FooterCache", "FooterKey"]
