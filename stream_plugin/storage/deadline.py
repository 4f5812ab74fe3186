"""A deadline for one whole download attempt, not for each socket read.

A socket timeout only bounds the wait for the next bytes: a server that drips a few bytes a second
keeps an attempt alive for as long as it drips. ``attempt_deadline`` arms a timer for the whole
attempt; when it fires it shuts the response's socket down, so the blocked read returns at once and
the store raises :func:`deadline_error` (transient: the retry loop tries again).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from stream_plugin.storage.base import TransientStorageError


def socket_of(response: Any) -> socket.socket | None:
    """The socket under an ``http.client.HTTPResponse`` (urllib, and urllib3's ``_fp``), if reachable."""
    for candidate in (response, getattr(response, "_fp", None)):
        raw = getattr(getattr(candidate, "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
        if isinstance(sock, socket.socket):
            return sock
    return None


def abort_response(response: Any) -> None:
    """Interrupt a read blocked on ``response`` from another thread: shut its socket down, else close it."""
    sock = socket_of(response)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        else:
            response.close()
    except OSError:
        pass  # Already closed: the read has ended anyway.


@contextmanager
def attempt_deadline(timeout: float | None, abort: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """Call ``abort`` if the body of the ``with`` runs past ``timeout`` seconds; yield "did it fire?"."""
    if timeout is None:
        yield lambda: False
        return
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        abort()

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        yield fired.is_set
    finally:
        timer.cancel()


def deadline_error(url: str, timeout: float, received: int) -> TransientStorageError:
    """The error of an attempt that ran past its deadline."""
    return TransientStorageError(
        f"Expected the download of {url} to finish within download_timeout={timeout}s (the bound of one "
        f"whole attempt), found it still running after {received} bytes; will retry. If the link is this "
        "slow, raise download_timeout"
    )
