import numpy as np
import pytest

from stream_plugin.reading.shard_table import ShardTable, Spanner

TABLE = ShardTable.from_counts([[3, 0, 2], [4]])


def test_table_numbers_shards_and_samples_globally_in_stream_order() -> None:
    assert TABLE.samples_per_shard.tolist() == [3, 0, 2, 4]
    assert TABLE.stream_per_shard.tolist() == [0, 0, 0, 1]
    assert TABLE.shards_per_stream.tolist() == [3, 1]
    assert TABLE.shard_offset_per_stream.tolist() == [0, 3]
    assert TABLE.samples_per_stream.tolist() == [5, 4]
    assert TABLE.sample_offset_per_stream.tolist() == [0, 5]
    assert TABLE.num_samples == 9


def test_locate_skips_empty_shards() -> None:
    shards, offsets = TABLE.locate(np.arange(9))
    assert shards.tolist() == [0, 0, 0, 2, 2, 3, 3, 3, 3]
    assert offsets.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]


def test_shards_of_is_locates_shard_ids_alone() -> None:
    ids = np.array([[8, 0], [3, 5]])
    assert TABLE.shards_of(ids).tolist() == [[3, 0], [2, 3]]
    with pytest.raises(IndexError, match=r"sample id -1 is out of range: expected 0 <= id < 9"):
        TABLE.shards_of(np.array([-1, 2]))


def test_locate_rejects_ids_outside_the_dataset() -> None:
    with pytest.raises(IndexError, match=r"sample id 9 is out of range: expected 0 <= id < 9"):
        TABLE.locate(np.array([0, 9]))


@pytest.mark.parametrize("sample_id", [-10, 9])
def test_an_id_outside_the_dataset_is_an_invalid_sample_index_as_mosaicml_says(sample_id: int) -> None:
    with pytest.raises(IndexError, match=r"Invalid sample index: pass an id in that range"):
        TABLE.locate(np.array([sample_id]))


def test_spanner_maps_one_id_like_mosaicml() -> None:
    assert Spanner(TABLE)[4] == (2, 1)
    assert len(Spanner(TABLE)) == 9
