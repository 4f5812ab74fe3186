"""Every sample of every dataset MosaicML Streaming 0.13 wrote decodes to what that library returned."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixture_values import assert_matches, manifest
from support.paths import FIXTURES_DIR

from stream_plugin.errors import UnsafeTypeError
from stream_plugin.format.index import load_index
from stream_plugin.format.reader import materialize_shard, open_shard

DATASETS = sorted(manifest())


def test_manifest_lists_every_fixture_folder() -> None:
    folders = {path.parent.name for path in FIXTURES_DIR.glob("*/index.json")}
    assert folders == set(DATASETS)


def _read_all(folder: Path, *, allow_unsafe_types: bool) -> list[dict]:
    samples = []
    for entry in load_index(folder):
        materialize_shard(entry, folder, validate_hash=True)
        reader = open_shard(entry, folder, allow_unsafe_types=allow_unsafe_types)
        try:
            samples.extend(reader.read_many(range(reader.num_samples)))
        finally:
            reader.close()
    return samples


@pytest.mark.parametrize("name", DATASETS)
def test_every_sample_decodes_as_mosaicml_decoded_it(name: str, tmp_path: Path) -> None:
    folder = tmp_path / name
    shutil.copytree(FIXTURES_DIR / name, folder)  # materialize_shard writes next to the stored files
    expected = manifest()[name]
    samples = _read_all(folder, allow_unsafe_types=True)
    assert len(samples) == expected["num_samples"] == len(expected["samples"])
    for index, (sample, tagged) in enumerate(zip(samples, expected["samples"])):
        assert sorted(sample) == sorted(tagged), (name, index)
        for column, value in sample.items():
            assert_matches(value, tagged[column], where=f"{name}[{index}].{column}")


def test_pkl_column_is_refused_without_allow_unsafe_types(tmp_path: Path) -> None:
    folder = tmp_path / "mds-all-encodings"
    shutil.copytree(FIXTURES_DIR / "mds-all-encodings", folder)
    entry = load_index(folder)[0]
    with pytest.raises(
        UnsafeTypeError, match=r"shard\.00000\.mds: column\(s\) \['pkl'\].*allow_unsafe_types=True"
    ):
        open_shard(entry, folder)
