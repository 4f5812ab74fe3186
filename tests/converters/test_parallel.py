"""map_to_mds / files_to_mds / convert --workers: same sample order for any N, merged only on success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from readback import read_all
from sample_fns import fails_on_seven, samples_of

from stream_plugin.cli import main
from stream_plugin.converters import files_to_mds, map_to_mds
from stream_plugin.converters.parallel import part_slices
from stream_plugin.errors import ConfigError

COLUMNS = {"input": "int", "k": "int", "text": "str"}


def expected(inputs: range) -> list[dict[str, Any]]:
    return [sample for item in inputs for sample in samples_of(item)]


def test_part_slices_are_contiguous_and_cover_every_input() -> None:
    for count in (1, 2, 7, 30):
        for workers in (1, 2, 3, 8):
            slices = part_slices(count, workers)
            assert [i for span in slices for i in span] == list(range(count))
            assert all(len(span) > 0 for span in slices) and len(slices) <= workers * 4


def test_sample_order_is_the_same_for_any_number_of_workers(tmp_path: Path) -> None:
    inputs = range(23)
    orders = []
    for workers in (1, 2, 3):
        out = tmp_path / f"n{workers}"
        written = map_to_mds(
            samples_of, inputs, str(out), columns=COLUMNS, workers=workers, progress=False, size_limit=200
        )
        assert written == len(expected(inputs))
        orders.append(read_all(out))
    assert orders[0] == expected(inputs)
    assert orders[1] == orders[0] and orders[2] == orders[0]
    assert json.loads((tmp_path / "n2" / "index.json").read_text())["shards"][0]["raw_data"][
        "basename"
    ].startswith("0/")


def test_a_failed_part_leaves_no_top_level_index(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="input 7 is broken"):
        map_to_mds(
            fails_on_seven, range(12), str(tmp_path / "out"), columns=COLUMNS, workers=2, progress=False
        )
    assert not (tmp_path / "out" / "index.json").exists()


def test_unpicklable_fn_is_refused_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"define fn at module level \(not a lambda or closure\), or pass workers=1"
    ):
        map_to_mds(
            lambda item: [], range(3), str(tmp_path / "out"), columns=COLUMNS, workers=2, progress=False
        )
    with pytest.raises(ConfigError, match=r"workers: expected an int >= 1, found 0"):
        map_to_mds(samples_of, range(3), str(tmp_path / "out"), columns=COLUMNS, workers=0)


def write_jsonl(path: Path, start: int, count: int) -> Path:
    path.write_text(
        "".join(json.dumps({"id": i, "word": f"w{i}"}) + "\n" for i in range(start, start + count))
    )
    return path


def test_files_convert_in_the_order_given(tmp_path: Path) -> None:
    files = [
        write_jsonl(tmp_path / f"{name}.jsonl", start, 10) for name, start in (("b", 0), ("a", 10), ("c", 20))
    ]
    files_to_mds(files, str(tmp_path / "out"), workers=2, progress=False)
    assert [sample["id"] for sample in read_all(tmp_path / "out")] == list(range(30))


def test_cli_convert_with_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(write_jsonl(tmp_path / f"part{i}.jsonl", i * 5, 5)) for i in range(3)]
    assert main(["convert", *files, str(tmp_path / "out"), "--workers", "2", "--no-progress"]) == 0
    assert "wrote 15 samples" in capsys.readouterr().out
    assert [sample["id"] for sample in read_all(tmp_path / "out")] == list(range(15))


def test_parallel_progress_counts_every_sample_and_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = range(12)
    map_to_mds(samples_of, inputs, str(tmp_path / "out"), columns=COLUMNS, workers=2, progress=True)
    shown = capsys.readouterr().err
    total = len(expected(inputs))
    [line] = shown.splitlines()  # stderr is not a terminal: one summary line, no frames
    assert line.startswith(f"convert: wrote {total} samples (") and "in 8 parts" in line


def test_file_url_out_is_written_and_merged(tmp_path: Path) -> None:
    out = (tmp_path / "out").as_uri()
    map_to_mds(samples_of, range(6), out, columns=COLUMNS, workers=2, progress=False)
    assert read_all(tmp_path / "out") == expected(range(6))
