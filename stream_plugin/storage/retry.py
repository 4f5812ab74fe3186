"""Retrying transient storage failures with exponential backoff and jitter, and waiting out throttling.

Stores never retry on their own; this module is the single place that does, so that "attempts" means
the same thing for every backend and tests can count requests exactly. A store's refusal for its rate
(``ThrottledError``: 429, ``SlowDown``) is not a failed attempt: the request waits for the node's
``NodeThrottle`` (the wait the store named, else the node's adapted rate) and goes again, until
``throttle_deadline``.
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
    ThrottledError,
    ThrottledTooLongError,
    TransientStorageError,
)
from stream_plugin.storage.download_settings import DEFAULT_THROTTLE_DEADLINE, DOWNLOAD_DEFAULTS
from stream_plugin.storage.throttle import NodeThrottle

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
    ``throttle_deadline`` bounds the time one operation may be throttled (refused for the store's rate,
    or waiting for the node's slot after such a refusal); throttling uses no attempt.
    """

    attempts: int = DOWNLOAD_DEFAULTS.download_retry + 1
    timeout: float | None = DOWNLOAD_DEFAULTS.download_timeout
    base_delay: float = 0.5
    max_delay: float = 10.0
    jitter: float = 1.0
    throttle_deadline: float = DEFAULT_THROTTLE_DEADLINE

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
        if not self.throttle_deadline > 0:
            raise ConfigError(
                f"Expected throttle_deadline > 0 seconds, found {self.throttle_deadline}; pass how long a download "
                f"may wait out a throttling store, such as {DEFAULT_THROTTLE_DEADLINE:.0f} (the default)."
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
        throttle_deadline: float = DEFAULT_THROTTLE_DEADLINE,
    ) -> RetryPolicy:
        """The policy matching MosaicML's ``download_retry`` / ``download_timeout`` arguments."""
        if download_retry < 0:
            raise ConfigError(
                f"Expected download_retry >= 0, found {download_retry}; use 0 to try once without retrying."
            )
        return cls(attempts=download_retry + 1, timeout=download_timeout, throttle_deadline=throttle_deadline)

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
    throttle: NodeThrottle | None = None,
) -> T:
    """Run ``operation`` until it succeeds, retrying transient failures per ``policy``.

    ``RemoteNotFoundError`` / ``RemoteAccessDeniedError`` (and any non-transient error) propagate at
    once. ``on_retry(attempt, error)`` is called after each failed attempt that will be retried
    (``attempt`` is 1-based). After the last attempt, raises ``RetriesExhaustedError`` naming
    ``describe``, the attempt count and the last cause.

    Every request first takes a slot from ``throttle`` (the node's, shared by its processes; without
    one, this call's own). A ``ThrottledError`` uses no attempt: the request goes again in the node's
    next slot, until it has been throttled for ``policy.throttle_deadline`` seconds
    (``ThrottledTooLongError``, naming the rate the node came down to).
    """
    gate = throttle if throttle is not None else NodeThrottle.for_node(None, describe)
    delays = policy.delays(rng)
    attempt = 1
    throttled_since: float | None = None
    refusals = 0
    last_refusal: ThrottledError | None = None
    while True:
        give_up_at = None if throttled_since is None else throttled_since + policy.throttle_deadline
        sent_at = gate.admit(give_up_at)
        if sent_at is None:
            raise _throttled_too_long(describe, policy, gate, refusals, last_refusal)
        try:
            result = operation()
        except FAIL_FAST:
            raise
        except ThrottledError as error:
            gate.refused(sent_at, error.wait)
            throttled_since = sent_at if throttled_since is None else throttled_since
            refusals += 1
            last_refusal = error
            continue
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
            attempt += 1
            sleep(delay)
            continue
        gate.answered(sent_at)
        return result


def _throttled_too_long(
    describe: str, policy: RetryPolicy, gate: NodeThrottle, refusals: int, last: ThrottledError | None
) -> ThrottledTooLongError:
    state = gate.state()
    rate = "unpaced" if state.rate is None else f"{state.rate:.3g} requests/s"
    error = ThrottledTooLongError(
        f"Expected {describe} to be admitted by a throttling store within throttle_deadline="
        f"{policy.throttle_deadline:g}s, found it refused {refusals} time(s) for the store's rate (last: {last}), "
        f"the node's request rate down to {rate} and its next slot past the deadline. The store's limit is "
        f"below this job's demand: raise throttle_deadline, start fewer processes at once, or ask the store "
        f"for a higher limit."
    )
    error.__cause__ = last
    return error
