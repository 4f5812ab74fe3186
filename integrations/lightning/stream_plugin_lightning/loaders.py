"""The loaders ``StreamingDataModule`` hands to Lightning.

``TrainLoader`` reports the position Lightning's counters imply (so Lightning's own loader-state
bookkeeping, which calls ``state_dict`` / ``load_state_dict`` on stateful loaders, saves and reloads the
same state as the DataModule) and checks, at the first batch of every pass, that the data continues
exactly where Lightning's counters say training is. The evaluation loaders are the core's
``EvalLoader``: every pass a complete pass of epoch 0, so validation and test see the same samples in
the same order every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from stream_plugin import LoaderPosition, StreamingDataLoader, StreamingDataset

# The expected state after the first batch of a pass, or None outside a Lightning fit.
ExpectedState = Callable[[], dict[str, int | str] | None]
# Called with (expected, found) when the data does not continue where training is.
MismatchHandler = Callable[[dict[str, Any], dict[str, Any]], None]

_POSITION_KEYS = ("epoch", "sample_in_epoch")


class TrainLoader(StreamingDataLoader):
    """A ``StreamingDataLoader`` whose state is Lightning's position and whose first batch is checked."""

    def __init__(
        self,
        dataset: StreamingDataset,
        *args: Any,
        state_now: Callable[[], dict[str, int | str] | None] | None = None,
        expected_after_first_batch: ExpectedState | None = None,
        on_mismatch: MismatchHandler | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, *args, **kwargs)
        self._state_now = state_now
        self._expected_after_first_batch = expected_after_first_batch
        self._on_mismatch = on_mismatch

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # Computed before the first fetch: Lightning's counters have not yet counted that batch.
        expected = self._expected_after_first_batch() if self._expected_after_first_batch else None
        first = True
        for batch in super().__iter__():
            if first and expected is not None:
                self._check(expected)
            first = False
            yield batch

    def _check(self, expected: dict[str, int | str]) -> None:
        # The loader's own count: the resume point plus the one batch it has just handed out.
        position = self.position
        if position is None:
            return
        found = _found_state(position)
        if any(found[key] != expected[key] for key in _POSITION_KEYS) and self._on_mismatch is not None:
            self._on_mismatch(expected, found)

    def state_dict(self) -> dict[str, int | str]:
        """Lightning's position as a data state during a fit; the loader's own count otherwise."""
        state = self._state_now() if self._state_now is not None else None
        return state if state is not None else super().state_dict()


def _found_state(position: LoaderPosition) -> dict[str, Any]:
    """The parts of a resume state that a mismatch report reads, from the loader's position."""
    return {
        "epoch": position.epoch,
        "sample_in_epoch": position.sample_in_epoch,
        "epoch_batch_size": position.epoch_batch_size,
    }
