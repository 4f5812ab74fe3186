"""``start_stagger``: spread the nodes' first shard downloads over a few seconds, against a store's rate limit.

When a thousand nodes start at once, every reader asks the store for its first shard in the same
second, and a rate-limited store answers most of them 429. With ``start_stagger`` S, node ``i`` of
``N`` holds its first shard downloads back ``i / N x S`` seconds (``stagger_delay``, pure), counted
from the moment the process first asks for a shard (``StartGate``): node 0 starts at once, the last
node almost S late. The index download is not delayed. ``stream-plugin simulate --tune
--target-first-batch`` proposes an S for a job (``docs/simulate.md``), the same rule as the
simulator's (``simulate.engine``: a node's first shards are asked for ``start_stagger x node / nodes``
after its workers start).

The gate is per process: every process that starts reading (a rank, each DataLoader worker) waits
once, before its first download; shards already cached are read at once. Persistent workers wait in
their first pass only; workers started again for a later pass start together again, and wait again.
"""

from __future__ import annotations

import math
import threading
import time
from numbers import Real

from stream_plugin.errors import ConfigError, ConfigTypeError


def check_start_stagger(seconds: object) -> float:
    """``seconds`` as a float of seconds >= 0, or a ``ConfigError`` that says the fix."""
    if isinstance(seconds, bool) or not isinstance(seconds, Real):
        raise ConfigTypeError(
            f"start_stagger: expected a number of seconds >= 0, found {type(seconds).__name__} {seconds!r:.80}; "
            "pass e.g. start_stagger=10.0 (0, the default, starts every node at once)"
        )
    if not math.isfinite(float(seconds)) or seconds < 0:
        raise ConfigError(
            f"start_stagger: expected a number of seconds >= 0, found {seconds!r}; pass e.g. "
            "start_stagger=10.0 (0, the default, starts every node at once)"
        )
    return float(seconds)


def stagger_delay(node: int, nodes: int, seconds: float) -> float:
    """How long node ``node`` of ``nodes`` holds its first shard downloads back: ``node / nodes x seconds``."""
    if not 0 <= node < nodes:
        raise ConfigError(
            f"start_stagger: expected a node index in [0, {nodes}), found {node}; check RANK, WORLD_SIZE and "
            "LOCAL_WORLD_SIZE (or the World passed to StreamingDataset)"
        )
    return seconds * node / nodes


class StartGate:
    """One process's hold on its first shard downloads: ``delay`` seconds after its first ``ask``.

    ``ask`` is called when the process asks for a shard, ``wait`` before it downloads one (from any
    thread: prefetch downloads run in background threads). Once the hold is over, both return at once.
    """

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._lock = threading.Lock()
        self._opens: float | None = None  # time.monotonic() at which downloads may start
        self.spent = delay <= 0

    def ask(self) -> None:
        """The process asks for a shard: the hold counts from its first ask."""
        if self._opens is None:
            with self._lock:
                if self._opens is None:
                    self._opens = time.monotonic() + self.delay

    def wait(self) -> None:
        """Block until the hold is over (``delay`` after the first ``ask``); the caller downloads next."""
        if self.spent:
            return
        self.ask()
        assert self._opens is not None
        left = self._opens - time.monotonic()
        if left > 0:
            time.sleep(left)
        self.spent = True


__all__ = ["StartGate", "check_start_stagger", "stagger_delay"]
