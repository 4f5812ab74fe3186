"""call_with_retries and RetryPolicy: what is retried, how long it waits, how it gives up."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from stream_plugin.errors import ConfigError, StorageError
from stream_plugin.storage import (
    RemoteAccessDeniedError,
    RemoteNotFoundError,
    RetriesExhaustedError,
    RetryPolicy,
    TransientStorageError,
    call_with_retries,
)

NO_JITTER = RetryPolicy(attempts=5, timeout=1.0, base_delay=0.5, max_delay=3.0, jitter=0.0)


def failing(*errors: BaseException, result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """An operation that raises ``errors`` in turn, then returns ``result``; and its call log."""
    calls: list[int] = []

    def operation() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return operation, calls


def test_success_on_the_first_try_never_sleeps() -> None:
    sleeps: list[float] = []
    operation, calls = failing()
    assert call_with_retries(operation, NO_JITTER, describe="op", sleep=sleeps.append) == "done"
    assert calls == [1]
    assert sleeps == []


def test_transient_errors_are_retried_with_exponential_backoff_capped_at_max_delay() -> None:
    sleeps: list[float] = []
    retries: list[tuple[int, BaseException]] = []
    errors = [TransientStorageError(f"503 #{index}") for index in range(4)]
    operation, calls = failing(*errors)

    result = call_with_retries(
        operation,
        NO_JITTER,
        describe="op",
        sleep=sleeps.append,
        on_retry=lambda attempt, error: retries.append((attempt, error)),
    )

    assert result == "done"
    assert calls == [1, 2, 3, 4, 5]
    assert sleeps == [0.5, 1.0, 2.0, 3.0]
    assert retries == [(1, errors[0]), (2, errors[1]), (3, errors[2]), (4, errors[3])]


def test_full_jitter_draws_each_wait_between_zero_and_its_cap_reproducibly() -> None:
    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=8.0, jitter=1.0)
    waits = list(policy.delays(random.Random(3)))
    assert waits == list(policy.delays(random.Random(3)))
    assert len(waits) == 5
    for retry, wait in enumerate(waits, start=1):
        assert 0.0 <= wait <= policy.delay_cap(retry)
    assert [policy.delay_cap(retry) for retry in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 8.0]


def test_builtin_connection_errors_and_timeouts_are_retried() -> None:
    sleeps: list[float] = []
    operation, calls = failing(ConnectionResetError("reset"), TimeoutError("slow"))
    assert call_with_retries(operation, NO_JITTER, describe="op", sleep=sleeps.append) == "done"
    assert len(calls) == 3


@pytest.mark.parametrize(
    "error", [RemoteNotFoundError("404"), RemoteAccessDeniedError("403"), ValueError("bug")]
)
def test_not_found_denied_and_other_errors_raise_at_once(error: Exception) -> None:
    sleeps: list[float] = []
    operation, calls = failing(error)
    with pytest.raises(type(error)) as caught:
        call_with_retries(operation, NO_JITTER, describe="op", sleep=sleeps.append)
    assert caught.value is error
    assert calls == [1]
    assert sleeps == []


def test_giving_up_names_the_operation_the_attempts_and_the_last_cause() -> None:
    sleeps: list[float] = []
    last = TransientStorageError("SlowDown (HTTP 503)")
    operation, calls = failing(TransientStorageError("first"), TransientStorageError("second"), last)
    policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)

    pattern = r"download s3://b/shard\.mds to succeed within 3 attempt\(s\).*TransientStorageError: SlowDown \(HTTP 503\)"
    with pytest.raises(RetriesExhaustedError, match=pattern) as caught:
        call_with_retries(operation, policy, describe="download s3://b/shard.mds", sleep=sleeps.append)

    assert isinstance(caught.value, StorageError)
    assert caught.value.__cause__ is last
    assert len(calls) == 3
    assert len(sleeps) == 2


def test_a_single_attempt_policy_never_retries() -> None:
    operation, calls = failing(TransientStorageError("once"))
    with pytest.raises(RetriesExhaustedError, match="within 1 attempt"):
        call_with_retries(
            operation, RetryPolicy.from_mosaic(download_retry=0), describe="op", sleep=lambda _: None
        )
    assert calls == [1]


def test_mosaic_arguments_map_to_attempts_and_timeout() -> None:
    policy = RetryPolicy.from_mosaic(download_retry=2, download_timeout=60)
    assert (policy.attempts, policy.timeout) == (3, 60)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"attempts": 0}, r"Expected RetryPolicy.attempts >= 1 .*found 0; pass download_retry \+ 1"),
        ({"timeout": 0}, r"Expected RetryPolicy.timeout > 0 seconds or None, found 0"),
        ({"base_delay": 5, "max_delay": 1}, r"found base_delay=5, max_delay=1; raise max_delay"),
        ({"jitter": 1.5}, r"Expected RetryPolicy.jitter in \[0, 1\], found 1.5"),
    ],
)
def test_invalid_policies_are_rejected_at_construction(arguments: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetryPolicy(**arguments)  # type: ignore[arg-type]


def test_negative_download_retry_is_rejected() -> None:
    with pytest.raises(ConfigError, match="Expected download_retry >= 0, found -1"):
        RetryPolicy.from_mosaic(download_retry=-1)
