"""Writer errors keep MosaicML 0.13's types and key phrases, so that code written against it still works."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_plugin.format.writer import MDSWriter


def test_a_size_limit_of_2_to_the_32_says_mosaicmls_phrase(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`size_limit` must be less than 2\\*\\*32"):
        MDSWriter(out=str(tmp_path), columns={"n": "int"}, size_limit=2**32)


def test_a_non_empty_output_folder_is_a_file_exists_error_saying_directory_is_not_empty(
    tmp_path: Path,
) -> None:
    (tmp_path / "old").write_text("x")
    with pytest.raises(FileExistsError, match="Directory is not empty"):
        MDSWriter(out=str(tmp_path), columns={"n": "int"})


def test_an_unknown_option_is_a_value_and_type_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"found unknown \['min_workers'\] \(Invalid Writer argument"
    ) as caught:
        MDSWriter(out=str(tmp_path), columns={"n": "int"}, min_workers=1)
    assert isinstance(caught.value, TypeError)
    assert not list(tmp_path.iterdir())
