"""Shard hashes: every digest in the MosaicML 0.13 fixtures, streaming, and mismatch errors."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import xxhash
from support.paths import FIXTURES_DIR

from stream_plugin.errors import ConfigError, MissingDependencyError, ShardIntegrityError
from stream_plugin.format.compression import decompress
from stream_plugin.format.hashing import check_hash_names, hash_data, hash_file, hash_names, verify_digests


def _fixture_digests() -> list[tuple[str, str, str, str | None]]:
    """(file path, algorithm, digest, compression) for every digest in every fixture index.json."""
    digests = []
    for index in sorted(FIXTURES_DIR.glob("**/index.json")):
        for shard in json.loads(index.read_text())["shards"]:
            for key in ("raw_data", "zip_data", "raw_meta", "zip_meta"):
                described = shard.get(key)
                if not described:
                    continue
                compression = shard["compression"] if key.startswith("raw") else None
                for name, digest in described["hashes"].items():
                    path = index.parent / described["basename"]
                    digests.append((str(path.relative_to(FIXTURES_DIR)), name, digest, compression))
    return digests


DIGESTS = _fixture_digests()


def test_fixtures_carry_the_expected_algorithms() -> None:
    assert {name for _, name, _, _ in DIGESTS} == {"md5", "sha1", "xxh3_64", "xxh64", "sha256"}


@pytest.mark.parametrize(
    ("path", "name", "digest", "compression"), DIGESTS, ids=[f"{d[0]}:{d[1]}" for d in DIGESTS]
)
def test_fixture_digests_match(
    path: str, name: str, digest: str, compression: str | None, tmp_path: Path
) -> None:
    stored = FIXTURES_DIR / path
    if stored.exists():
        data = stored.read_bytes()
        assert hash_file(name, stored) == digest
    else:  # only the compressed file is stored; the raw digest describes its decompressed bytes
        assert compression is not None
        zipped = stored.with_name(f"{stored.name}.{compression.split(':')[0]}")
        data = decompress(compression, zipped.read_bytes())
    assert hash_data(name, data) == digest
    assert hash_data(name, memoryview(data)) == digest


def test_fixture_files_verify_against_every_recorded_digest() -> None:
    index = json.loads((FIXTURES_DIR / "mds-all-encodings" / "index.json").read_text())
    for shard in index["shards"]:
        raw = shard["raw_data"]
        listed = list(raw["hashes"])
        assert len(listed) > 1, listed
        # Every listed digest has a hasher here (MissingDependencyError if not): naming them all makes
        # each one required, where the default skips those that cannot run.
        assert check_hash_names(listed) == listed
        verify_digests(
            raw["hashes"],
            FIXTURES_DIR / "mds-all-encodings" / raw["basename"],
            source=raw["basename"],
            names=listed,
        )


def test_hash_names_cover_hashlib_and_xxhash_families() -> None:
    names = hash_names()
    for name in (
        "md5",
        "sha1",
        "sha256",
        "sha3_512",
        "blake2b",
        "blake2s",
        "xxh32",
        "xxh64",
        "xxh3_64",
        "xxh3_128",
        "xxh128",
    ):
        assert name in names
    assert all(hash_data(name, b"abc") for name in names)


@pytest.mark.parametrize("name", hash_names())
def test_every_algorithm_matches_its_reference_implementation(name: str) -> None:
    data = bytes(range(256)) * 5
    reference = getattr(hashlib, name, None) or getattr(xxhash, name)
    assert hash_data(name, data) == reference(data).hexdigest()


def test_file_hash_streams_across_chunk_boundaries(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # > 2 chunks of 1 MiB
    (tmp_path / "f").write_bytes(data)
    assert hash_file("sha256", tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert hash_file("xxh64", tmp_path / "f") == xxhash.xxh64(data).hexdigest()


def test_check_hash_names_accepts_none_and_known_names() -> None:
    assert check_hash_names(None) == []
    assert check_hash_names(("sha1", "xxh64")) == ["sha1", "xxh64"]


def test_unknown_hash_name_is_a_config_error_listing_the_choices() -> None:
    with pytest.raises(
        ConfigError, match=r"expected a hash algorithm in \['md5', .*'xxh128'\], found 'crc32'"
    ):
        check_hash_names(["sha1", "crc32"])
    with pytest.raises(ConfigError, match=r"found 'crc32'"):
        hash_data("crc32", b"")


def test_a_bare_string_is_refused_rather_than_read_as_letters() -> None:
    with pytest.raises(ConfigError, match=r"found the string 'sha1'; wrap it in a list: \['sha1'\]"):
        check_hash_names("sha1")


def test_missing_xxhash_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "xxhash", None)
    with pytest.raises(
        MissingDependencyError, match=r"need the 'xxhash' package.*pip install 'stream-plugin\[xxhash\]'"
    ):
        check_hash_names(["md5", "xxh3_64"])
    assert check_hash_names(["md5"]) == ["md5"]
    # By default verification skips what cannot run here and still checks the rest.
    (tmp_path / "f").write_bytes(b"abc")
    verify_digests({"xxh64": "0" * 16, "md5": hashlib.md5(b"abc").hexdigest()}, tmp_path / "f", source="f")
    with pytest.raises(MissingDependencyError, match=r"stream-plugin\[xxhash\]"):
        verify_digests({"xxh64": "0" * 16}, tmp_path / "f", source="f", names=["xxh64"])


def test_digest_mismatch_names_source_algorithm_both_digests_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    good = {"sha1": hashlib.sha1(b"abc").hexdigest(), "md5": "0" * 32}
    with pytest.raises(
        ShardIntegrityError,
        match=rf"shard.00003.mds: expected md5 digest 0{{32}} \(from index.json\), found {hashlib.md5(b'abc').hexdigest()}; delete the local copy and download it again",
    ):
        verify_digests(good, tmp_path / "f", source="shard.00003.mds")
    verify_digests(good, tmp_path / "f", source="f", names=["sha1"])


def test_asking_for_an_algorithm_the_index_lacks_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    with pytest.raises(
        ConfigError, match=r"s: expected index.json to record digests for \['sha256'\], found only \['md5'\]"
    ):
        verify_digests({"md5": hashlib.md5(b"abc").hexdigest()}, tmp_path / "f", source="s", names=["sha256"])


def test_unknown_algorithms_in_the_index_are_skipped_by_default(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    verify_digests(
        {"crc32": "deadbeef", "sha1": hashlib.sha1(b"abc").hexdigest()}, tmp_path / "f", source="f"
    )
    with pytest.raises(ShardIntegrityError, match=r"expected sha1 digest"):
        verify_digests({"crc32": "deadbeef", "sha1": "0" * 40}, tmp_path / "f", source="f")
