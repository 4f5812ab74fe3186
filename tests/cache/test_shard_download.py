"""``ShardFetcher``: a shard's files staged into verified temporaries, then placed; a corrupt download
staged is refused before anything is in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_plugin.cache.downloads import Downloader
from stream_plugin.cache.shard_download import ShardFetcher
from stream_plugin.cache.shard_files import is_present, temporary
from stream_plugin.cache.stats import CacheStats, StatsGroup
from stream_plugin.errors import ShardIntegrityError
from stream_plugin.storage.base import ObjectStore
from stream_plugin.storage.retry import RetryPolicy
from stream_plugin.storage.throttle import NodeThrottle


def _fetcher(store: ObjectStore, local: Path) -> tuple[ShardFetcher, CacheStats]:
    stats = CacheStats()
    downloader = Downloader(
        store, "test-remote", RetryPolicy.from_mosaic(0, 10.0, 10.0), NodeThrottle.for_node(None, "test-remote"),
        timeout=10.0, on_retry=stats.record_retry,
    )  # fmt: skip
    fetcher = ShardFetcher(local, downloader, StatsGroup(stats), attempts=2, keep_zip=False, validate_hash="sha1")
    return fetcher, stats


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_stage_downloads_into_verified_temporaries_and_places_nothing(
    make_dataset, counting_store, local: Path, compression: str | None
) -> None:
    dataset = make_dataset(shards=1, compression=compression)
    entry = dataset.entries[0]
    fetcher, _ = _fetcher(counting_store(dataset.remote), local)
    staged = fetcher.stage(entry)
    assert not is_present(local, entry)
    assert [final.name for _, final in staged.moves] == [raw.basename for raw, _ in entry.file_pairs()]
    assert all(path == temporary(final) and path.is_file() for path, final in staged.moves)
    assert staged.downloaded == sum((stored or raw).bytes for raw, stored in entry.file_pairs())


def test_fetch_places_the_shard_and_a_corrupt_one_is_fetched_again(
    make_dataset, corrupting_store, local: Path
) -> None:
    dataset = make_dataset(shards=1)
    entry = dataset.entries[0]
    fetcher, stats = _fetcher(corrupting_store(dataset.remote, 1), local)
    fetcher.fetch(entry)
    dataset.assert_intact(local, [entry])
    assert (stats.snapshot().shards_downloaded, stats.snapshot().retries) == (1, 1)
    assert not temporary(local / entry.raw_data.basename).exists()


def test_a_shard_corrupt_on_every_attempt_is_refused_and_leaves_nothing(
    make_dataset, corrupting_store, local: Path
) -> None:
    dataset = make_dataset(shards=1)
    entry = dataset.entries[0]
    fetcher, _ = _fetcher(corrupting_store(dataset.remote, 5), local)
    with pytest.raises(ShardIntegrityError, match=r"found a mismatch on each of 2 download\(s\)"):
        fetcher.fetch(entry)
    assert not local.exists() or [path.name for path in local.iterdir()] == []
