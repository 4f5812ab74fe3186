"""The cache's log lines: retries with their cause, slow downloads, evictions, a remote that changed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.fault_proxy import FaultRule

from stream_plugin.cache import CacheConfig, ShardCache, downloads


def _cache(local: Path, remote: str, store: object = None, **options: object) -> ShardCache:
    cache = ShardCache(CacheConfig(local=str(local), remote=remote, **options), store)  # type: ignore[arg-type]
    cache.open_index()
    return cache


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == level]


def test_a_retried_download_logs_a_warning_with_its_cause(
    make_dataset, upload_remote, remote_proxy, local: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dataset = make_dataset(shards=1)
    remote_proxy.set_rules(FaultRule("http_503", path_contains="shard.00000", limit=1))
    cache = _cache(local, upload_remote(dataset), download_retry=2)
    with caplog.at_level(logging.WARNING, logger="stream_plugin"):
        cache.ensure(cache.open_index()[0])
    [warning] = _messages(caplog, logging.WARNING)
    assert "download of 'shard.00000.mds'" in warning
    assert "failed on attempt 1 of 3 (TransientStorageError: " in warning
    assert "503" in warning
    assert [record.name for record in caplog.records] == ["stream_plugin.storage.retry"]


def test_a_slow_download_logs_a_warning_and_a_quick_one_only_debug(
    make_dataset, local: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = make_dataset(shards=2)
    cache = _cache(local, str(dataset.remote))
    with caplog.at_level(logging.DEBUG, logger="stream_plugin"):
        cache.ensure(dataset.entries[0])
        assert _messages(caplog, logging.WARNING) == []
        assert any("downloaded 'shard.00000.mds'" in line for line in _messages(caplog, logging.DEBUG))
        monkeypatch.setattr(downloads, "SLOW_DOWNLOAD_SECONDS", 0.0)
        cache.ensure(dataset.entries[1])
    [warning] = _messages(caplog, logging.WARNING)
    assert warning.startswith("slow download: 'shard.00001.mds' from ")
    assert "check the network or the store" in warning


def test_an_eviction_logs_at_debug_only(make_dataset, local: Path, caplog: pytest.LogCaptureFixture) -> None:
    dataset = make_dataset(shards=3, shard_bytes=1000)
    limit = 2 * max(entry.raw_data.bytes for entry in dataset.entries)
    cache = _cache(local, str(dataset.remote), cache_limit=limit)
    with caplog.at_level(logging.DEBUG, logger="stream_plugin"):
        for entry in dataset.entries:
            cache.ensure(entry)
    evictions = [line for line in _messages(caplog, logging.DEBUG) if line.startswith("evicted shard")]
    assert evictions and "'shard.00000.mds'" in evictions[0]
    assert _messages(caplog, logging.WARNING) == []


def test_a_shard_that_no_longer_matches_the_index_warns_that_the_remote_changed(
    make_dataset, local: Path, corrupting_store, caplog: pytest.LogCaptureFixture
) -> None:
    dataset = make_dataset(shards=1)
    store = corrupting_store(dataset.remote, bad_downloads=1)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote), validate_hash="sha1"), store)
    with caplog.at_level(logging.WARNING, logger="stream_plugin"):
        cache.ensure(dataset.entries[0])
    [warning] = _messages(caplog, logging.WARNING)
    assert "does not match index.json on download 1 of 3" in warning
    assert "the remote may have changed" in warning


def test_the_library_prints_nothing_unless_logging_is_configured(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import logging, stream_plugin\n"
        "logging.getLogger('stream_plugin.storage.retry').warning('hidden')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stderr == ""
