"""merge_index: MosaicML 0.13's two call forms, its exact output, natural folder order, remote out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixture_values import manifest, to_value
from support.paths import FIXTURES_DIR
from writer_rig import TEXT_COLUMNS, read_dataset, text_samples, write_dataset

from stream_plugin.errors import ConfigError, UnsafePathError
from stream_plugin.format.index import INDEX_BASENAME, load_index
from stream_plugin.format.merge import merge_index, natural_key

MERGED = FIXTURES_DIR / "mds-merged"


def _parts_of_merged_fixture() -> list[tuple[str, list[dict]]]:
    """The samples of each sub-dataset of mds-merged, in order."""
    samples = [{k: to_value(v) for k, v in s.items()} for s in manifest()["mds-merged"]["samples"]]
    parts, start = [], 0
    for part in sorted(path.name for path in MERGED.iterdir() if path.is_dir()):
        count = sum(entry.samples for entry in load_index(MERGED / part))
        parts.append((part, samples[start : start + count]))
        start += count
    return parts


def test_merging_rewritten_parts_reproduces_the_mosaicml_merged_index_byte_for_byte(tmp_path: Path) -> None:
    size_limit = load_index(MERGED)[0].size_limit
    for part, samples in _parts_of_merged_fixture():
        write_dataset("mds", str(tmp_path / part), samples, {"x": "int", "y": "str"}, size_limit=size_limit)
        assert (tmp_path / part / INDEX_BASENAME).read_bytes() == (
            MERGED / part / INDEX_BASENAME
        ).read_bytes()
    merge_index(str(tmp_path))
    assert (tmp_path / INDEX_BASENAME).read_bytes() == (MERGED / INDEX_BASENAME).read_bytes()


def test_list_form_merges_the_given_indexes_in_order(tmp_path: Path) -> None:
    shutil.copytree(MERGED, tmp_path / "m")
    (tmp_path / "m" / INDEX_BASENAME).unlink()
    urls = [str(tmp_path / "m" / part / INDEX_BASENAME) for part in ("2", "0")]
    merge_index(urls, str(tmp_path / "m"))
    basenames = [entry.raw_data.basename for entry in load_index(tmp_path / "m")]
    assert basenames[0].startswith("2/") and basenames[-1].startswith("0/")
    assert len(basenames) == len(load_index(MERGED / "2")) + len(load_index(MERGED / "0"))


def test_merged_dataset_reads_every_sample_of_every_part(tmp_path: Path) -> None:
    for part in ("a", "b"):
        write_dataset(
            "json", str(tmp_path / part), text_samples(30), TEXT_COLUMNS, size_limit=400, compression="gz"
        )
    merge_index(out=str(tmp_path))
    entries = load_index(tmp_path)
    assert {entry.zip_meta.basename.split("/")[0] for entry in entries} == {"a", "b"}
    assert read_dataset(tmp_path) == text_samples(30) * 2


def test_sub_folders_merge_in_natural_order(tmp_path: Path) -> None:
    for part in ("10", "2", "1"):
        write_dataset("mds", str(tmp_path / part), [{"n": int(part), "word": "", "x": 0.0}], TEXT_COLUMNS)
    (tmp_path / "notes").mkdir()  # a folder without an index is not a part
    merge_index(str(tmp_path))
    assert [sample["n"] for sample in read_dataset(tmp_path)] == [1, 2, 10]
    assert sorted(["p10", "p2", "p1"], key=natural_key) == ["p1", "p2", "p10"]


def test_merge_uploads_the_index_to_a_remote_out(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    for part in ("0", "1"):
        write_dataset(
            "mds", (str(tmp_path / "local" / part), (remote / part).as_uri()), text_samples(5), TEXT_COLUMNS
        )
    merge_index((str(tmp_path / "local"), remote.as_uri()), keep_local=False)
    assert not (tmp_path / "local" / INDEX_BASENAME).exists()
    assert read_dataset(remote) == text_samples(5) * 2


def test_merge_reads_remote_part_indexes(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    for part in ("0", "1"):
        write_dataset("mds", str(remote / part), text_samples(4), TEXT_COLUMNS)
    urls = [f"{(remote / part).as_uri()}/{INDEX_BASENAME}" for part in ("1", "0")]
    # Indexes named by URL, merged output to another folder: basenames keep the part folder name.
    merge_index(
        [(str(tmp_path / "missing" / part / INDEX_BASENAME), url) for part, url in zip("10", urls)],
        str(remote),
    )
    assert (
        json.loads((remote / INDEX_BASENAME).read_text())["shards"][0]["raw_data"]["basename"]
        == "1/shard.00000.mds"
    )


def test_merging_a_folder_without_parts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected sub-folders of .* that hold an index.json, found none"):
        merge_index(str(tmp_path))


def test_a_part_index_with_an_escaping_basename_is_refused(tmp_path: Path) -> None:
    write_dataset("mds", str(tmp_path / "0"), text_samples(2), TEXT_COLUMNS)
    index = json.loads((tmp_path / "0" / INDEX_BASENAME).read_text())
    index["shards"][0]["raw_data"]["basename"] = "../../etc/passwd"
    (tmp_path / "0" / INDEX_BASENAME).write_text(json.dumps(index))
    with pytest.raises(UnsafePathError, match=r"escapes the dataset folder"):
        merge_index(str(tmp_path))
    assert not (tmp_path / INDEX_BASENAME).exists()
