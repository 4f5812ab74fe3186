"""How long a throttling store asks us to wait: Retry-After (seconds or HTTP date), RateLimit-Reset, RateLimit."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from stream_plugin.storage.throttle_hints import requested_wait, retry_after_seconds

NOW = 1_700_000_000.0


def test_retry_after_in_seconds_is_the_wait() -> None:
    assert requested_wait({"Retry-After": "3"}) == 3.0
    assert requested_wait({"retry-after": " 0 "}) == 0.0  # an SDK's plain dict: any case


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    date = formatdate(NOW + 42, usegmt=True)
    assert retry_after_seconds(date, lambda: NOW) == pytest.approx(42.0)
    assert retry_after_seconds(formatdate(NOW - 10, usegmt=True), lambda: NOW) == 0.0  # past: go now


def test_ratelimit_reset_and_the_structured_ratelimit_header_name_the_wait() -> None:
    assert requested_wait({"RateLimit-Reset": "7"}) == 7.0
    assert requested_wait({"RateLimit": '"api";r=0;t=55', "RateLimit-Policy": '"api";q=500;w=300'}) == 55.0
    assert requested_wait({"RateLimit": "limit=100, remaining=0, reset=50"}) == 50.0


def test_retry_after_wins_over_ratelimit() -> None:
    assert requested_wait({"Retry-After": "2", "RateLimit": '"api";r=0;t=55'}) == 2.0


@pytest.mark.parametrize(
    "headers", [None, {}, {"Retry-After": "soon"}, {"Retry-After": "-1"}, {"RateLimit": '"api";r=0'}]
)
def test_no_usable_header_names_no_wait(headers: dict[str, str] | None) -> None:
    assert requested_wait(headers) is None
