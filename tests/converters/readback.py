"""Read a converted dataset back in full through our own reader, in the order of its index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stream_plugin import StreamingDataset


def read_all(local: Path, remote: str | None = None) -> list[dict[str, Any]]:
    """Every sample of the dataset at ``remote`` (cached in ``local``) or at ``local``, index order."""
    dataset = StreamingDataset(local=str(local), remote=remote, batch_size=1, shuffle=False)
    return [dataset[index] for index in range(dataset.size())]
