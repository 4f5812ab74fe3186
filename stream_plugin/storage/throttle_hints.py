"""How long a throttling store asks us to wait, read from its answer's headers.

* ``Retry-After`` (RFC 9110 §10.2.3): delay seconds (``120``) or an HTTP date (``Fri, 31 Dec 1999
  23:59:59 GMT``);
* ``RateLimit-Reset`` (the IETF draft's first form, and GitHub's ``X-RateLimit-Reset`` relatives):
  seconds until the quota resets;
* ``RateLimit`` (the IETF draft's structured form, as the Hugging Face Hub sends it:
  ``"api";r=0;t=55``, or the older ``limit=100, remaining=0, reset=50``): the ``t`` or ``reset``
  parameter, in seconds.

The first header present wins, in that order. A value that is not a number of seconds or a date is
ignored (the node's adapted rate then paces the retry). Waits are never negative.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime

_RESET_PARAMETER = re.compile(r"(?:^|[;,\s])(?:t|reset)\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]`` whatever its case (a plain dict from an SDK is not case-insensitive)."""
    value = headers.get(name)
    if value is not None:
        return str(value)
    lowered = name.lower()
    for key, found in headers.items():
        if key.lower() == lowered:
            return str(found)
    return None


def _seconds(value: str) -> float | None:
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds == seconds and seconds >= 0 else None  # NaN is not a wait


def retry_after_seconds(value: str, wall_clock: Callable[[], float] = time.time) -> float | None:
    """A ``Retry-After`` value in seconds from now: delay seconds or an HTTP date; None if neither."""
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        moment = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # an HTTP date is always GMT
        return None
    return max(0.0, moment.timestamp() - wall_clock())


def requested_wait(headers: Mapping[str, str] | None, wall_clock: Callable[[], float] = time.time) -> float | None:
    """Seconds the store asked us to wait before the next request, or None where it did not say."""
    if not headers:
        return None
    retry_after = _header(headers, "Retry-After")
    if retry_after is not None:
        wait = retry_after_seconds(retry_after, wall_clock)
        if wait is not None:
            return wait
    reset = _header(headers, "RateLimit-Reset")
    if reset is not None and (wait := _seconds(reset)) is not None:
        return wait
    structured = _header(headers, "RateLimit")
    if structured is not None and (match := _RESET_PARAMETER.search(structured)) is not None:
        return float(match.group(1))
    return None


__all__ = ["requested_wait", "retry_after_seconds"]
