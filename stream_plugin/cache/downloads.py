"""``Downloader``: one object from the stream's store into a local file, with retries, the node's
shared request rate, and a log line that says how long it took."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from stream_plugin.redaction import get_logger
from stream_plugin.storage.base import ObjectStore, store_identity
from stream_plugin.storage.retry import RetryPolicy, call_with_retries
from stream_plugin.storage.throttle import NodeThrottle
from stream_plugin.units import format_bytes

logger = get_logger(__name__)
# A download (all attempts) taking longer than this is logged as slow, with its size and rate.
SLOW_DOWNLOAD_SECONDS = 10.0


class Downloader:
    """Requests to one remote's store, each retried by ``policy`` and paced by the node's ``throttle``."""

    def __init__(
        self,
        store: ObjectStore,
        remote: str,
        policy: RetryPolicy,
        throttle: NodeThrottle,
        *,
        timeout: float,
        on_retry: Callable[[], None],
    ) -> None:
        """``remote`` names the store in messages; ``on_retry`` counts each retried download."""
        self._store = store
        self._remote = remote
        self._policy = policy
        self._throttle = throttle
        self._timeout = timeout
        self._on_retry = on_retry

    @property
    def remote(self) -> str:
        return self._remote

    def download(self, key: str, dest: Path) -> int:
        """Download ``key`` to ``dest`` (its folder made); return its bytes."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        store = self._store
        started = time.monotonic()
        size = call_with_retries(
            lambda: store.download(key, dest, timeout=self._timeout),
            self._policy,
            describe=f"download of {key!r} from {self._remote}",
            on_retry=lambda _attempt, _error: self._on_retry(),
            throttle=self._throttle,
        )
        elapsed = time.monotonic() - started
        rate = f"{format_bytes(size / max(elapsed, 1e-9))}/s"
        if elapsed >= SLOW_DOWNLOAD_SECONDS:
            logger.warning(
                "slow download: %r from %s took %.1fs for %s (%s); check the network or the store",
                key, self._remote, elapsed, format_bytes(size), rate,
            )
        else:
            logger.debug("downloaded %r from %s: %s in %.3fs (%s)", key, self._remote, format_bytes(size), elapsed, rate)
        return size

    def identity(self, key: str) -> str | None:
        """The store's identity of ``key`` now (``ObjectStore.identity``); None when it gives none."""
        store = self._store
        return call_with_retries(
            lambda: store_identity(store, key, timeout=self._timeout),
            self._policy,
            describe=f"identity of {key!r} at {self._remote}",
            throttle=self._throttle,
        )


__all__ = ["SLOW_DOWNLOAD_SECONDS", "Downloader"]
