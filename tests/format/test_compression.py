"""Shard compression: MosaicML 0.13 fixtures decompress exactly, names round-trip, corruption is caught."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

import pytest
from support.paths import FIXTURES_DIR

from stream_plugin.errors import ConfigError, MissingDependencyError, ShardIntegrityError
from stream_plugin.format.compression import (
    CompressionSpec,
    codec_families,
    compress,
    decompress,
    decompress_file,
    parse_compression,
    register_codec,
    unregister_codec,
)

COMPRESSED_FIXTURES = ["mds-zstd", "mds-zstd-7", "mds-gz", "mds-bz2", "mds-br", "mds-snappy", "json-zstd"]
FAMILIES = ["zstd", "gz", "bz2", "br", "snappy"]
# Compressible but not trivial, so that a flipped bit lands in real entropy-coded data.
RAW = b"".join(f"sample {i} {i * i % 977}\n".encode() for i in range(3000)) + os.urandom(512)


def _fixture_files() -> list[tuple[str, dict, str]]:
    """(dataset/basename, raw file description, compression) for every compressed fixture file."""
    files = []
    for dataset in COMPRESSED_FIXTURES:
        for shard in json.loads((FIXTURES_DIR / dataset / "index.json").read_text())["shards"]:
            pairs = [(shard["raw_data"], shard["zip_data"])]
            if shard.get("raw_meta"):
                pairs.append((shard["raw_meta"], shard["zip_meta"]))
            files += [(f"{dataset}/{zipped['basename']}", raw, shard["compression"]) for raw, zipped in pairs]
    return files


FIXTURE_FILES = _fixture_files()


@pytest.mark.parametrize(("path", "raw", "compression"), FIXTURE_FILES, ids=[f[0] for f in FIXTURE_FILES])
def test_fixture_decompresses_to_the_recorded_raw_bytes(path: str, raw: dict, compression: str) -> None:
    data = decompress(
        compression, (FIXTURES_DIR / path).read_bytes(), source=path, expected_size=raw["bytes"]
    )
    assert len(data) == raw["bytes"]
    if path.startswith("json-zstd/"):  # written without hashes: content is checked in the next test
        return
    assert hashlib.sha256(data).hexdigest() == raw["hashes"]["sha256"]


def test_json_zstd_fixture_decompresses_to_the_samples_and_offsets_mosaicml_wrote() -> None:
    dataset = json.loads((FIXTURES_DIR / "manifest.json").read_text())["datasets"]["json-zstd"]
    lines = []
    for shard in json.loads((FIXTURES_DIR / "json-zstd" / "index.json").read_text())["shards"]:
        data = decompress("zstd", (FIXTURES_DIR / "json-zstd" / shard["zip_data"]["basename"]).read_bytes())
        meta = decompress("zstd", (FIXTURES_DIR / "json-zstd" / shard["zip_meta"]["basename"]).read_bytes())
        (count,) = struct.unpack_from("<I", meta)
        offsets = struct.unpack_from(f"<{count + 1}I", meta, 4)
        assert (count, offsets[0], offsets[-1]) == (shard["samples"], 0, len(data))
        lines += [data[begin:end] for begin, end in zip(offsets, offsets[1:], strict=False)]
    expected = [{k: cell["value"] for k, cell in sample.items()} for sample in dataset["samples"]]
    assert lines == [(json.dumps(sample, sort_keys=True) + "\n").encode() for sample in expected]


@pytest.mark.parametrize(("path", "raw", "compression"), FIXTURE_FILES, ids=[f[0] for f in FIXTURE_FILES])
def test_fixture_decompresses_to_a_file_in_the_same_bytes(
    path: str, raw: dict, compression: str, tmp_path: Path
) -> None:
    target = tmp_path / "raw"
    assert (
        decompress_file(compression, FIXTURES_DIR / path, target, expected_size=raw["bytes"]) == raw["bytes"]
    )
    assert target.read_bytes() == decompress(compression, (FIXTURES_DIR / path).read_bytes())


def test_fixtures_cover_every_family() -> None:
    assert {parse_compression(f[2]).family for f in FIXTURE_FILES} == set(FAMILIES)


@pytest.mark.parametrize(
    "spec",
    ["zstd", "zstd:1", "zstd:22", "gz", "gz:0", "gz:9", "bz2", "bz2:1", "br", "br:0", "br:11", "snappy"],
)
def test_round_trip_in_memory_and_through_files(spec: str, tmp_path: Path) -> None:
    packed = compress(spec, memoryview(RAW))
    assert len(packed) < len(RAW) or spec == "gz:0"  # level 0 stores
    assert decompress(spec, memoryview(packed)) == RAW
    (tmp_path / "in").write_bytes(packed)
    assert decompress_file(spec, tmp_path / "in", tmp_path / "out") == len(RAW)
    assert (tmp_path / "out").read_bytes() == RAW


@pytest.mark.parametrize("family", FAMILIES)
def test_files_larger_than_one_read_chunk_stream_through(family: str, tmp_path: Path) -> None:
    raw = os.urandom(1 << 20) + RAW * 30  # incompressible head: the compressed file spans several chunks
    packed = compress(f"{family}:1" if family in ("zstd", "bz2", "br") else family, raw)
    assert len(packed) > 1 << 20
    (tmp_path / "in").write_bytes(packed)
    assert decompress_file(family, tmp_path / "in", tmp_path / "out", expected_size=len(raw)) == len(raw)
    assert (tmp_path / "out").read_bytes() == raw


@pytest.mark.parametrize("family", FAMILIES)
def test_empty_raw_file_round_trips(family: str, tmp_path: Path) -> None:
    assert decompress(family, compress(family, b"")) == b""
    (tmp_path / "in").write_bytes(compress(family, b""))
    assert decompress_file(family, tmp_path / "in", tmp_path / "out") == 0


def test_levels_change_the_output_and_default_matches_the_documented_level() -> None:
    assert compress("zstd", RAW) == compress("zstd:3", RAW) != compress("zstd:19", RAW)
    assert compress("gz", RAW) == compress("gz:9", RAW) != compress("gz:1", RAW)
    assert compress("br", RAW) == compress("br:11", RAW)
    assert compress("bz2", RAW) == compress("bz2:9", RAW)


def test_gz_output_is_reproducible() -> None:
    assert compress("gz", RAW) == compress("gz", RAW)


def test_zstd_output_carries_a_content_checksum() -> None:
    frame_descriptor = compress("zstd", RAW)[4]
    assert frame_descriptor & 0b100


def test_concatenated_zstd_frames_decompress_in_full(tmp_path: Path) -> None:
    packed = compress("zstd", RAW[:100]) + compress("zstd", RAW[100:])
    assert decompress("zstd", packed) == RAW
    (tmp_path / "in").write_bytes(packed)
    assert decompress_file("zstd", tmp_path / "in", tmp_path / "out") == len(RAW)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cut", [1, 7, 0.5])
def test_truncated_input_is_a_shard_integrity_error_naming_the_source(
    family: str, cut: float, tmp_path: Path
) -> None:
    packed = compress(family, RAW)
    short = packed[: int(len(packed) * cut)] if isinstance(cut, float) else packed[:-cut]
    message = rf"shard.7: expected a complete '{family}' stream, found truncated or corrupt data .*delete the local copy and download it again"
    with pytest.raises(ShardIntegrityError, match=message):
        decompress(family, short, source="shard.7")
    (tmp_path / "in").write_bytes(short)
    with pytest.raises(ShardIntegrityError, match=message):
        decompress_file(family, tmp_path / "in", tmp_path / "out", source="shard.7")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_empty_input_is_a_shard_integrity_error(family: str, tmp_path: Path) -> None:
    with pytest.raises(
        ShardIntegrityError, match=rf"x: expected a complete '{family}' stream, found an empty input"
    ):
        decompress(family, b"", source="x")
    (tmp_path / "in").write_bytes(b"")
    with pytest.raises(ShardIntegrityError, match=r"found an empty file"):
        decompress_file(family, tmp_path / "in", tmp_path / "out")


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x10]) + data[position + 1 :]


@pytest.mark.parametrize("family", ["zstd", "gz", "bz2"])
def test_bit_flips_are_detected_by_checksummed_formats(family: str, tmp_path: Path) -> None:
    packed = compress(family, RAW)
    for position in range(len(packed) // 4, len(packed) - 8, len(packed) // 7):
        with pytest.raises(ShardIntegrityError, match=rf"expected a complete '{family}' stream"):
            decompress(family, _flip(packed, position))
    (tmp_path / "in").write_bytes(_flip(packed, len(packed) // 2))
    with pytest.raises(ShardIntegrityError, match=rf"expected a complete '{family}' stream"):
        decompress_file(family, tmp_path / "in", tmp_path / "out")


@pytest.mark.parametrize("family", ["br", "snappy"])
def test_undetected_bit_flips_are_caught_by_the_size_check(family: str, tmp_path: Path) -> None:
    # br and raw snappy carry no checksum; the caller's size (and hash) check is what catches damage.
    packed = compress(family, RAW)
    with pytest.raises(ShardIntegrityError, match=rf"it decompresses to 5 bytes instead of the {len(RAW)}"):
        decompress(family, compress(family, b"hello"), expected_size=len(RAW))
    damaged = _flip(packed, len(packed) // 2)
    with contextlib.suppress(ShardIntegrityError):
        assert decompress(family, damaged) != RAW


def test_missing_file_is_not_reported_as_corruption(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        decompress_file("zstd", tmp_path / "nope", tmp_path / "out")


@pytest.mark.parametrize(
    ("family", "module", "extra"), [("br", "brotli", "brotli"), ("snappy", "snappy", "snappy")]
)
def test_missing_optional_package_names_the_extra(
    family: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    packed = compress(family, RAW)
    monkeypatch.setitem(sys.modules, module, None)
    message = rf"compression '{family}' needs the '{module}' package.*pip install 'stream-plugin\[{extra}\]'"
    with pytest.raises(MissingDependencyError, match=message):
        compress(family, RAW)
    with pytest.raises(MissingDependencyError, match=message):
        decompress(family, packed)
    (tmp_path / "in").write_bytes(packed)
    with pytest.raises(MissingDependencyError, match=message):
        decompress_file(family, tmp_path / "in", tmp_path / "out")


@pytest.mark.parametrize(
    ("text", "family", "level"),
    [
        ("zstd", "zstd", None),
        ("zstd:7", "zstd", 7),
        ("gz:0", "gz", 0),
        ("bz2", "bz2", None),
        ("br:11", "br", 11),
        ("snappy", "snappy", None),
    ],
)
def test_names_parse_and_keep_the_users_spelling(text: str, family: str, level: int | None) -> None:
    spec = parse_compression(text)
    assert spec == CompressionSpec(family, level)
    assert (spec.name, spec.extension) == (text, family)


def test_effective_level_falls_back_to_the_family_default() -> None:
    defaults = {family: parse_compression(family).effective_level for family in FAMILIES}
    assert defaults == {"zstd": 3, "gz": 9, "bz2": 9, "br": 11, "snappy": None}


def test_no_compression_parses_to_none() -> None:
    assert parse_compression(None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lz4", r"expected a compression family in \['br', 'bz2', 'gz', 'snappy', 'zstd'\], found 'lz4'"),
        ("zstd:0", r"expected a 'zstd' level in 1..22 \(default 3\), found 0"),
        ("zstd:23", r"level in 1..22 .*found 23"),
        ("gz:10", r"'gz' level in 0..9 \(default 9\), found 10"),
        ("bz2:0", r"'bz2' level in 1..9"),
        ("br:12", r"'br' level in 0..11 \(default 11\), found 12"),
        ("snappy:1", r"expected no level for compression 'snappy', found 1"),
        ("zstd:07", r"found 'zstd:07'; write the level as a plain integer"),
        ("zstd:x", r"found 'zstd:x'"),
        ("zstd:", r"found 'zstd:'"),
        (7, r"expected compression as a string .*found int 7"),
    ],
)
def test_invalid_names_are_config_errors_listing_the_choices(text: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_compression(text)  # type: ignore[arg-type]


def test_registered_codec_is_usable_by_name_and_level() -> None:
    register_codec(
        "rev",
        lambda data, level: bytes([level or 0]) + data[::-1],
        lambda data: data[1:][::-1],
        levels=range(1, 5),
        default_level=2,
    )
    try:
        assert "rev" in codec_families()
        assert compress("rev", b"abc") == b"\x02cba"
        assert compress("rev:4", b"abc") == b"\x04cba"
        assert decompress("rev", b"\x02cba") == b"abc"
        with pytest.raises(ConfigError, match=r"'rev' level in 1..4"):
            parse_compression("rev:5")
        with pytest.raises(ConfigError, match=r"found 'rev' is already registered; .*overwrite=True"):
            register_codec("rev", lambda d, lv: d, lambda d: d, levels=None, default_level=None)
    finally:
        unregister_codec("rev")
    assert "rev" not in codec_families()


def test_registering_a_codec_with_inconsistent_levels_is_refused() -> None:
    with pytest.raises(
        ConfigError,
        match=r"expected default_level inside levels .*found levels=range\(1, 3\) and default_level=5",
    ):
        register_codec("bad", lambda d, lv: d, lambda d: d, levels=range(1, 3), default_level=5)
    with pytest.raises(ConfigError, match=r"plain identifier .*found 'a.b'"):
        register_codec("a.b", lambda d, lv: d, lambda d: d, levels=None, default_level=None)


@pytest.mark.parametrize("data", [b"hello", bytearray(b"hello")])
def test_compress_and_decompress_without_compression_return_the_bytes_as_they_are(data: bytes) -> None:
    assert compress(None, data) == b"hello"
    assert decompress(None, data) == b"hello"


@pytest.mark.parametrize("spec", ["xyz", "br:99", "gz:99"])
def test_an_unknown_family_or_level_is_not_a_supported_compression_algorithm(spec: str) -> None:
    """MosaicML's key phrase, so that code matching its message keeps working."""
    with pytest.raises(ConfigError, match="is not a supported compression algorithm"):
        compress(spec, b"hello")
