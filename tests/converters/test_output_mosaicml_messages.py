"""The converters' output checks keep the writers' MosaicML error types and phrases."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_plugin.converters.output import check_writer_options, prepare_output


def test_an_unknown_writer_option_says_invalid_writer_argument() -> None:
    with pytest.raises(ValueError, match=r"found \['min_workers'\] \(Invalid Writer argument\(s\)\)"):
        check_writer_options({"out": "x", "min_workers": 1}, caller="dataframe_to_mds")


def test_a_non_empty_output_folder_says_directory_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(FileExistsError, match="Directory is not empty"):
        prepare_output(str(tmp_path), exist_ok=False, caller="map_to_mds")
    assert (tmp_path / "old.txt").exists()
