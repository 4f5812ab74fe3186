"""udf_iterable functions that Spark's Python workers import by name (no heavy imports: workers start fast)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def tokens(frame: Any, repeat: int) -> Iterator[dict[str, Any]]:
    for row_id, text in zip(frame["id"], frame["text"]):
        for copy in range(repeat):
            yield {"id": int(row_id), "copy": copy, "tokens": np.frombuffer(text.encode(), np.uint8)}


def fail_first_attempt(frame: Any) -> Iterator[dict[str, Any]]:
    """Partition 1's first attempt dies on its last row, after storing several shards; its retry succeeds."""
    from pyspark import TaskContext

    context = TaskContext.get()
    for row_id, text in zip(frame["id"], frame["text"]):
        if context.partitionId() == 1 and context.attemptNumber() == 0 and row_id == frame["id"].iloc[-1]:
            raise RuntimeError("injected failure on the first attempt")
        yield {"id": int(row_id), "text": text}


def always_fail_partition_one(frame: Any) -> Iterator[dict[str, Any]]:
    from pyspark import TaskContext

    if TaskContext.get().partitionId() == 1:
        raise RuntimeError("partition 1 always fails")
    for row_id, text in zip(frame["id"], frame["text"]):
        yield {"id": int(row_id), "text": text}
