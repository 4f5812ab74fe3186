"""Sample functions that worker processes import by name (kept free of heavy imports: spawn is cheap)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def samples_of(item: int) -> Iterator[dict[str, Any]]:
    """Input i yields i % 5 samples, so parts have uneven sizes (and some inputs none)."""
    for k in range(item % 5):
        yield {"input": item, "k": k, "text": f"{item}-{k}"}


def fails_on_seven(item: int) -> Iterator[dict[str, Any]]:
    if item == 7:
        raise RuntimeError("input 7 is broken")
    yield from samples_of(item)
