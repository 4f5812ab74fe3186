"""Retrying transient storage failures with exponential backoff and jitter.

Stores never retry on their own; this module is the single place that does, so that "attempts" means
the same thing for every backend and tests can count requests exactly.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from stream_plugin.errors import ConfigError
from stream_plugin.redaction import get_logger
from stream_plugin.storage.base import (
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetriesExhaustedError,
    TransientStorageError,
)
from stream_plugin.storage.download_settings import DOWNLOAD_DEFAULTS

T = TypeVar("T")
logger = get_logger(__name__)

# Connection-level builtins are retried too, so a store that lets a raw socket error through
# still behaves; 404 and 403 subclass FileNotFoundError / PermissionError, not these.
RETRYABLE: tuple[type[BaseException], ...] = (TransientStorageError, ConnectionError, TimeoutError)
FAIL_FAST: tuple[type[BaseException], ...] = (RemoteNotFoundError, RemoteAccessDeniedError)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry one storage operation.

    ``attempts`` counts the first try (MosaicML's ``download_retry`` is ``attempts - 1``); ``timeout``
    bounds each attempt; the wait before retry ``n`` (1-based) is
    ``min(max_delay, base_delay * 2 ** (n - 1))`` scaled down by up to ``jitter`` (1.0 = full jitter).
    """

    attempts: int = DOWNLOAD_DEFAULTS.download_retry + 1
    timeout: float | None = DOWNLOAD_DEFAULTS.download_timeout
    base_delay: float = 0.5
    max_delay: float = 10.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(
                f"Expected RetryPolicy.attempts >= 1 (the first try counts), found {self.attempts}; pass download_retry + 1."
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(
                f"Expected RetryPolicy.timeout > 0 seconds or None, found {self.timeout}; pass a positive number of seconds."
            )
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ConfigError(
                f"Expected 0 <= base_delay <= max_delay, found base_delay={self.base_delay}, max_delay={self.max_delay}; raise max_delay."
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(
                f"Expected RetryPolicy.jitter in [0, 1], found {self.jitter}; use 1.0 for full jitter or 0.0 for none."
            )

    @classmethod
    def from_mosaic(
        cls,
        download_retry: int = DOWNLOAD_DEFAULTS.download_retry,
        download_timeout: float | None = DOWNLOAD_DEFAULTS.download_timeout,
    ) -> RetryPolicy:
        """The policy matching MosaicML's ``download_retry`` / ``download_timeout`` arguments."""
        if download_retry < 0:
            raise ConfigError(
                f"Expected download_retry >= 0, found {download_retry}; use 0 to try once without retrying."
            )
        return cls(attempts=download_retry + 1, timeout=download_timeout)

    def delay_cap(self, retry: int) -> float:
        """Longest wait before retry number ``retry`` (1-based), before jitter."""
        # Cap the exponent so huge attempt counts cannot overflow a float.
        return min(self.max_delay, self.base_delay * 2.0 ** min(retry - 1, 64))

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits between attempts: ``attempts - 1`` values."""
        draw = (rng or random.Random()).random
        for retry in range(1, self.attempts):
            cap = self.delay_cap(retry)
            yield cap * (1.0 - self.jitter * draw())


def call_with_retries(
    operation: Callable[[], T],
    policy: RetryPolicy,
    *,
    describe: str,
    on_retry: Callable[[int, BaseException], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run ``operation`` until it succeeds, retrying transient failures per ``policy``.

    ``RemoteNotFoundError`` / ``RemoteAccessDeniedError`` (and any non-transient error) propagate at
    once. ``on_retry(attempt, error)`` is called after each failed attempt that will be retried
    (``attempt`` is 1-based). After the last attempt, raises ``RetriesExhaustedError`` naming
    ``describe``, the attempt count and the last cause.
    """
    delays = policy.delays(rng)
    for attempt in range(1, policy.attempts + 1):
        try:
            return operation()
        except FAIL_FAST:
            raise
        except RETRYABLE as error:
            if attempt == policy.attempts:
                raise RetriesExhaustedError(
                    f"Expected {describe} to succeed within {policy.attempts} attempt(s), found every attempt failed; "
                    f"last error: {type(error).__name__}: {error}. Check the network and endpoint, or raise "
                    f"download_retry / download_timeout."
                ) from error
            if on_retry is not None:
                on_retry(attempt, error)
            delay = next(delays)
            logger.warning(
                "%s failed on attempt %d of %d (%s: %s); retrying in %.2fs",
                describe,
                attempt,
                policy.attempts,
                type(error).__name__,
                error,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
