import numpy as np

from stream_plugin.reading.iteration import _CHUNK, _rows


def _positions(shard_ids: np.ndarray, offsets: np.ndarray) -> list[tuple[int, int, int]]:
    return [(position, *row) for position, row in enumerate(_rows(shard_ids, offsets))]  # type: ignore[misc]


def test_positions_cross_chunk_boundaries_without_gaps_or_repeats() -> None:
    count = 2 * _CHUNK + 17
    shard_ids = np.arange(count, dtype=np.int64) // 1000
    offsets = np.arange(count, dtype=np.int64) % 1000
    produced = list(_positions(shard_ids, offsets))
    assert [position for position, _, _ in produced] == list(range(count))
    assert all(
        type(shard) is int and type(offset) is int for _, shard, offset in produced[_CHUNK - 1 : _CHUNK + 1]
    )
    assert produced[_CHUNK] == (_CHUNK, _CHUNK // 1000, _CHUNK % 1000)


def test_positions_of_an_empty_pass_are_empty() -> None:
    assert list(_positions(np.zeros(0, np.int64), np.zeros(0, np.int64))) == []
