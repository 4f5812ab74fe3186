"""NodeClock.read_times: the node's read ``p`` of a pass happens at row ``p // width``, at the time its
rank slot and in-batch index give (the module docstring's rule), checked read by read."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.reading.node_forecast import NodeClock


def _time_of_read(clock: NodeClock, read: int) -> int:
    row, column = divmod(read, clock.width)
    rank, index = divmod(column, clock.device_batch_size)  # columns are rank-major: B per rank
    return (clock.start_row + row) * clock.width + index * clock.ranks + rank


@pytest.mark.parametrize(
    "clock",
    [NodeClock(3, 0, 2, 4, 8, 1), NodeClock(0, 1, 1, 1, 1, 0), NodeClock(5, 0, 2, 3, 2, 1)],
    ids=["8-ranks", "one-reader", "odd-batch"],
)
@pytest.mark.parametrize("first, count", [(0, 0), (0, 1), (5, 100), (31, 97), (64, 64), (7, 1)])
def test_read_times_follow_rows_then_in_batch_index_then_rank(clock: NodeClock, first: int, count: int) -> None:
    expected = [_time_of_read(clock, read) for read in range(first, first + count)]
    np.testing.assert_array_equal(clock.read_times(first, count), np.array(expected, dtype=np.int64))
