"""``Stream``: arguments kept as MosaicML keeps them, the folders they name, and the stream registry."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from support.datasets import write_ids

from stream_plugin import Stream, streams_registry
from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.reading.sources import open_streams
from stream_plugin.reading.stream import DOWNLOAD_DEFAULTS
from stream_plugin.reading.stream_registry import build_streams


def test_stream_split_keeps_local_as_given() -> None:
    stream = Stream(remote="s3://bucket/data", local="/cache/data", split="train")
    assert (stream.remote, stream.local, stream.split) == ("s3://bucket/data", "/cache/data", "train")
    assert stream.local_dir == os.path.join("/cache/data", "train")
    assert stream.remote_dir == "s3://bucket/data/train"


def test_stream_without_local_gets_mosaicmls_temporary_folder() -> None:
    digest = hashlib.blake2s(b"s3://bucket/data", digest_size=16).hexdigest()
    assert Stream(remote="s3://bucket/data").local == os.path.join(tempfile.gettempdir(), digest, "")
    with_split = Stream(remote="s3://bucket/data", split="val")
    assert with_split.local == os.path.join(tempfile.gettempdir(), digest, "val")
    assert with_split.local_dir == os.path.join(tempfile.gettempdir(), digest, "val", "val")


def test_stream_with_remote_equal_to_local_is_local_only(tmp_path: Path) -> None:
    stream = Stream(remote=str(tmp_path), local=str(tmp_path) + "/")
    assert stream.remote == str(tmp_path)
    assert stream.remote_dir is None


def test_stream_apply_default_fills_only_what_is_unset() -> None:
    stream = Stream(local="/cache", download_retry=5)
    stream.apply_default({"split": "train", "download_retry": 2, "keep_zip": True})
    assert stream.split == "train"
    assert stream.local == "/cache"
    assert stream._download_retry == 5 and stream._keep_zip is True


class _TaggedStream(Stream):
    def __init__(self, *, tag: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.tag = tag


def test_streams_registry_builds_a_registered_subclass_by_name() -> None:
    streams_registry.register("tagged", func=_TaggedStream)
    assert "tagged" in streams_registry
    (stream,) = build_streams(
        None,
        defaults={"remote": None, "local": "/cache", "split": None},
        stream_name="tagged",
        stream_config={"tag": "web", "local": "/ignored"},
    )
    assert isinstance(stream, _TaggedStream)
    assert (stream.tag, stream.local) == ("web", "/cache")  # the dataset's arguments win, as in MosaicML


def test_streams_registry_register_works_as_a_decorator() -> None:
    @streams_registry.register("decorated")
    class Decorated(Stream):
        pass

    assert streams_registry.get("decorated") is Decorated


def test_streams_registry_refuses_what_is_not_a_stream() -> None:
    with pytest.raises(
        ConfigTypeError, match="expected a subclass of stream_plugin.Stream, found <class 'dict'>"
    ):
        streams_registry.register("bad", func=dict)  # type: ignore[arg-type]


def test_streams_registry_names_the_choices_for_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match=r"stream_name: expected one of \[.*'stream'.*\], found 'nope'"):
        streams_registry.get("nope")


def test_stream_config_must_be_a_dict() -> None:
    with pytest.raises(TypeError, match="stream_config: expected a dict of extra Stream arguments"):
        build_streams(None, defaults={"local": "/cache"}, stream_config=[("a", 1)])  # type: ignore[arg-type]


def test_build_streams_applies_the_datasets_split_to_given_streams() -> None:
    given = [Stream(local="/a"), Stream(local="/b", split="own")]
    built = build_streams(given, defaults={"remote": None, "local": None, "split": "train"})
    assert [stream.split for stream in built] == ["train", "own"]


def test_stream_throttle_deadline_defaults_to_15_minutes_and_is_checked() -> None:
    assert Stream(local="/data").throttle_deadline == 15 * 60.0
    assert Stream(local="/data", throttle_deadline=30).throttle_deadline == 30.0
    given = Stream(local="/data")
    given.apply_default({"throttle_deadline": 60.0})  # a dataset-wide default, where one is given
    assert given.throttle_deadline == 60.0
    with pytest.raises(ConfigError, match=r"expected throttle_deadline > 0 seconds.*found 0; pass None for the default, 900s"):
        Stream(local="/data", throttle_deadline=0)


def test_a_streams_throttle_deadline_reaches_its_cache(tmp_path: Path) -> None:
    write_ids(tmp_path / "remote", range(8), size_limit=200)
    stream = Stream(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), throttle_deadline=42)
    _, opened = open_streams([stream], DOWNLOAD_DEFAULTS, cache_limit=None)
    assert opened.cache_specs[0].config.throttle_deadline == 42.0
