"""TokenViews: a sample's tokens read from its tail where the MDS layout allows it, else decoded; both
give the decoded tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stream_plugin import MDSWriter, World
from stream_plugin.format.index import load_index
from stream_plugin.text import StreamingTokenBlockDataset
from stream_plugin.text.token_views import tail_dtype


def _write(folder: Path, columns: dict[str, str], rows: list[dict[str, object]]) -> None:
    with MDSWriter(out=str(folder), columns=columns, size_limit=1 << 9) as writer:
        for row in rows:
            writer.write(row)


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"tokens": "ndarray:uint16"}, "<u2"),
        ({"tokens": "bytes"}, "<i4"),  # token_encoding_type
        ({"id": "int", "tokens": "ndarray:int32"}, "<i4"),  # tokens last: still the tail
        ({"tokens": "ndarray:int32", "zz": "str"}, None),  # another column after the tokens
        ({"tokens": "ndarray"}, None),  # the dtype is per sample
        ({"tokens": "json"}, None),
    ],
)
def test_tail_dtype_only_where_samples_end_with_their_tokens(
    tmp_path: Path, columns: dict[str, str], expected: str | None
) -> None:
    tokens = np.arange(5, dtype=np.int32)
    values = {"ndarray:uint16": tokens.astype(np.uint16), "bytes": tokens.tobytes(), "json": tokens.tolist()}
    row = {
        name: values.get(encoding, tokens) if name == "tokens" else {"int": 1, "str": "x"}[encoding]
        for name, encoding in columns.items()
    }
    _write(tmp_path, columns, [row])
    entry = load_index(tmp_path / "index.json")[0]
    found = tail_dtype(entry, "tokens", "int32")
    assert (None if found is None else found.str) == expected


@pytest.mark.parametrize("after", [False, True])
def test_blocks_are_the_tokens_whether_read_from_the_tail_or_decoded(tmp_path: Path, after: bool) -> None:
    rng = np.random.default_rng(0)
    rows, flat = [], []
    for index in range(60):
        tokens = rng.integers(0, 60_000, int(rng.integers(1, 30))).astype(np.uint16)
        flat.append(tokens)
        rows.append({"tokens": tokens, **({"zz": "x" * index} if after else {})})
    _write(tmp_path, {"tokens": "ndarray:uint16", **({"zz": "str"} if after else {})}, rows)
    stream = np.concatenate(flat)
    dataset = StreamingTokenBlockDataset(
        local=str(tmp_path), block_size=8, batch_size=1, dtype="stored", world=World(rank=0, world_size=1)
    )
    for block in range(len(dataset)):
        assert dataset[block].tolist() == stream[block * 8 : block * 8 + 9].tolist()
