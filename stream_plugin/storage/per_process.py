"""``PerProcess``: a value each process makes for itself on first use (an SDK client, a filesystem).

SDK clients hold sockets, locks and threads that must not cross a ``fork`` or a pickle (DataLoader
workers get the store either way). A store keeps its client in a ``PerProcess``: the value is made
once per process, under a lock, and is dropped when the holder is pickled or used in another process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """Holds ``make()``'s result for the current process; ``make`` must pickle (a store's bound method)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._value: T | None = None

    def get(self) -> T:
        """The value of this process, made on first use."""
        if self._pid != os.getpid():
            self._reset()
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    value = self._value = self._make()
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {"make": self._make}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._make = state["make"]
        self._reset()
