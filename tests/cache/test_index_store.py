"""The parsed index kept in binary form next to index.json: reused while current, parsed once per node."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stream_plugin.cache.index_store as index_store
import stream_plugin.cache.remote_index as remote_index
from stream_plugin import StreamingDataset
from stream_plugin.cache import CacheConfig, ShardCache
from stream_plugin.cache.locks import ControlFolder
from stream_plugin.errors import RemoteChangedError
from stream_plugin.format.index import INDEX_BASENAME, load_index, write_index
from stream_plugin.format.index_columns import read_columns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of every index parse this process makes from now on."""
    seen: list[str] = []

    def counting(file: Any, *, source: str, identity: str | None) -> Any:
        seen.append(source)
        return read_columns(file, source=source, identity=identity)

    monkeypatch.setattr(index_store, "read_columns", counting)
    monkeypatch.setattr(remote_index, "read_columns", counting)
    return seen


def _cache(local: Path, remote: Path | None) -> ShardCache:
    return ShardCache(CacheConfig(local=str(local), remote=None if remote is None else f"file://{remote}"))


def _digest(index: Path, identity: str | None) -> str:
    digest = hashlib.sha256(index.read_bytes())
    if identity is not None:
        digest.update(b"\0" + identity.encode("utf-8"))
    return digest.hexdigest()


def _columns_file(local: Path) -> Path:
    return ControlFolder(local).index_columns(INDEX_BASENAME)


def test_binary_index_is_reused_on_a_warm_cache(make_dataset: Callable[..., Any], local: Path, parses: list[str]) -> None:
    dataset = make_dataset(shards=5)
    first = _cache(local, dataset.remote).opened_index()
    assert len(parses) == 1  # the download is validated and kept: not parsed again to open it
    again = _cache(local, dataset.remote).opened_index()
    assert len(parses) == 1
    assert list(again.entries) == list(first.entries) == dataset.entries
    assert again.columns.samples.tolist() == [entry.samples for entry in dataset.entries]
    for local_only in (_cache(dataset.remote, None), _cache(dataset.remote, None)):
        assert list(local_only.opened_index().entries) == dataset.entries
    assert len(parses) == 2  # a local-only folder keeps its parse too


def test_index_digest_is_the_fingerprint_of_the_index_bytes_and_identity(
    make_dataset: Callable[..., Any], local: Path
) -> None:
    dataset = make_dataset(shards=2)
    cold = _cache(local, dataset.remote)
    opened = cold.opened_index()
    identity = cold.index_identity()
    assert identity is not None
    assert opened.digest == _digest(local / INDEX_BASENAME, identity)  # as before the binary form
    assert _cache(local, dataset.remote).opened_index().digest == opened.digest
    assert _cache(dataset.remote, None).opened_index().digest == _digest(dataset.remote / INDEX_BASENAME, None)
    assert _cache(dataset.remote, None).opened_index().digest == _digest(dataset.remote / INDEX_BASENAME, None)


def test_binary_index_is_rebuilt_when_the_local_index_is_rewritten(
    make_dataset: Callable[..., Any], parses: list[str]
) -> None:
    dataset = make_dataset(shards=3)
    assert len(_cache(dataset.remote, None).opened_index().entries) == 3
    write_index(dataset.remote, [entry.config for entry in dataset.entries[:2]])
    reopened = _cache(dataset.remote, None).opened_index()
    assert len(parses) == 2
    assert list(reopened.entries) == dataset.entries[:2]
    assert reopened.digest == _digest(dataset.remote / INDEX_BASENAME, None)


def test_binary_index_is_invalidated_when_the_remote_index_changes(
    make_dataset: Callable[..., Any], local: Path, parses: list[str]
) -> None:
    dataset = make_dataset(shards=3)
    _cache(local, dataset.remote).opened_index()
    write_index(dataset.remote, [entry.config for entry in dataset.entries[:1]])
    with pytest.raises(RemoteChangedError, match="found it rewritten"):  # never the old parse
        _cache(local, dataset.remote).opened_index()
    (local / INDEX_BASENAME).unlink()  # the cached index is dropped: the new one is fetched and parsed
    reopened = _cache(local, dataset.remote).opened_index()
    assert list(reopened.entries) == dataset.entries[:1]
    assert len(parses) == 2
    # A binary form recorded under another remote identity is not served either.
    path, control = local / INDEX_BASENAME, ControlFolder(local)
    other = index_store.open_index(path, control, INDEX_BASENAME, identity="another write")
    assert len(parses) == 3 and other.digest == _digest(path, "another write")


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:],  # one bit flipped
        lambda data: b"",
        lambda data: b"not a binary index at all",
    ],
    ids=["truncated", "bit-flip", "empty", "garbage"],
)
def test_corrupt_binary_index_is_detected_and_rebuilt(
    make_dataset: Callable[..., Any],
    local: Path,
    parses: list[str],
    damage: Callable[[bytes], bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    dataset = make_dataset(shards=4)
    _cache(local, dataset.remote).opened_index()
    stored = _columns_file(local)
    good = stored.read_bytes()
    stored.write_bytes(damage(good))
    with caplog.at_level(logging.WARNING, logger=index_store.__name__):
        reopened = _cache(local, dataset.remote).opened_index()
    assert "is corrupt" in caplog.text
    assert len(parses) == 2
    assert list(reopened.entries) == dataset.entries
    assert stored.read_bytes() == good  # rebuilt whole
    _cache(local, dataset.remote).opened_index()
    assert len(parses) == 2


_RANK = textwrap.dedent(
    """
    import json, sys
    import stream_plugin.cache.index_store as index_store
    import stream_plugin.cache.remote_index as remote_index
    from stream_plugin.cache import CacheConfig, ShardCache
    from stream_plugin.format.index_columns import read_columns

    parses = []
    def counting(file, *, source, identity):
        parses.append(source)
        return read_columns(file, source=source, identity=identity)
    index_store.read_columns = remote_index.read_columns = counting
    local, remote = sys.argv[1:3]
    remote = None if remote == "-" else remote
    opened = ShardCache(CacheConfig(local=local, remote=remote)).opened_index()
    print(json.dumps({"parses": len(parses), "digest": opened.digest, "shards": len(opened.entries)}))
    """
)


@pytest.mark.parametrize("kind", ["local-only", "file-remote"])
def test_concurrent_ranks_parse_the_index_once(make_dataset: Callable[..., Any], local: Path, kind: str) -> None:
    dataset = make_dataset(shards=2)
    configs = [entry.config for entry in dataset.entries]
    write_index(dataset.remote, [  # 20k entries: a parse long enough for the ranks to meet
        {**configs[number % 2], "raw_data": {**configs[number % 2]["raw_data"], "basename": f"s{number}.mds"}}
        for number in range(20_000)
    ])
    folder, remote = (dataset.remote, "-") if kind == "local-only" else (local, f"file://{dataset.remote}")
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(folder), remote], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(4)
    ]
    results = [json.loads(rank.communicate(timeout=120)[0]) for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks)
    assert sum(result["parses"] for result in results) == 1
    assert {(result["digest"], result["shards"]) for result in results} == {
        (_digest(folder / INDEX_BASENAME, _cache(folder, None if remote == "-" else dataset.remote).index_identity()), 20_000)
    }


def test_dataset_opens_from_the_binary_index_with_entries_on_demand(
    make_dataset: Callable[..., Any], tmp_path: Path, parses: list[str]
) -> None:
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(tmp_path / "data"), columns={"id": "int"}, size_limit=100) as writer:
        for number in range(40):
            writer.write({"id": number})
    first = StreamingDataset(local=str(tmp_path / "data"), batch_size=1)
    second = StreamingDataset(local=str(tmp_path / "data"), batch_size=1)
    assert len(parses) == 1
    assert second.shards == first.shards == load_index(tmp_path / "data")
    assert second.state_dict(0, False)["fingerprint"] == first.state_dict(0, False)["fingerprint"]
    assert sorted(int(sample["id"]) for sample in second) == list(range(40))


def test_a_local_only_dataset_folder_is_never_written_and_keeps_its_parse_in_the_user_cache(
    make_dataset: Callable[..., Any], parses: list[str]
) -> None:
    from stream_plugin.cache.locks import kept_index_folder

    dataset = make_dataset(shards=3)
    before = sorted(path.name for path in dataset.remote.iterdir())
    _cache(dataset.remote, None).opened_index()
    _cache(dataset.remote, None).opened_index()
    assert sorted(path.name for path in dataset.remote.iterdir()) == before
    assert len(parses) == 1  # the second open loaded the kept parse
    assert kept_index_folder(dataset.remote).index_columns(INDEX_BASENAME).is_file()


def test_eviction_lists_the_stream_from_the_kept_parse_not_index_json(
    make_dataset: Callable[..., Any], local: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import stream_plugin.format.index as index_module

    dataset = make_dataset(shards=4, shard_bytes=1000)
    _cache(local, dataset.remote).opened_index()  # the node's parse, kept
    whole_parses: list[str] = []
    parse_index = index_module.parse_index

    def counting(text: Any, *, source: str = INDEX_BASENAME) -> Any:
        whole_parses.append(source)
        return parse_index(text, source=source)

    monkeypatch.setattr(index_module, "parse_index", counting)
    limit = 2 * max(entry.raw_data.bytes for entry in dataset.entries)
    cache = ShardCache(CacheConfig(local=str(local), remote=str(dataset.remote), cache_limit=limit))
    cache.fetch_index()  # no set_shards: eviction lists the stream's shards by itself
    for entry in dataset.entries:
        cache.ensure(entry)
    assert cache.stats.snapshot().bytes_evicted > 0
    assert (len(parses), whole_parses) == (1, [])  # parsed once for the node, then read from its binary form
