"""One stream's table uses the index's counts as they are: a warm open of a million shards makes one fresh array."""

import numpy as np

from stream_plugin.reading.shard_table import ShardTable


def test_one_streams_table_uses_its_counts_without_a_copy() -> None:
    counts = np.array([3, 0, 2, 5], dtype=np.int64)
    counts.setflags(write=False)  # as a view of the node's kept parse is
    table = ShardTable.from_counts([counts])
    assert table.samples_per_shard is counts
    assert table.sample_offset_per_shard is table.shape.shard_offsets
    assert table.sample_offset_per_shard.tolist() == [0, 3, 3, 5, 10]
    assert table.stream_per_shard.tolist() == [0, 0, 0, 0]
    assert (table.samples_per_stream.tolist(), table.sample_offset_per_stream.tolist()) == ([10], [0])
    assert table.locate(np.array([0, 3, 9]))[0].tolist() == [0, 2, 3]


def test_an_empty_stream_list_makes_an_empty_table() -> None:
    table = ShardTable.from_counts([])
    assert (table.num_shards, table.num_samples, table.samples_per_stream.tolist()) == (0, 0, [])
