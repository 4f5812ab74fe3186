"""``row_reader``: one sample of decoded columns as a dict, compiled for the column count.

The per-sample hot path: ``{name_0: column_0[index], ...}`` written out (no loop, no generator), with
the names and columns bound as arguments, so the generated source holds no user text. One source per
column count is compiled once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

RowRead = Callable[[int], dict[str, Any]]


@lru_cache(maxsize=64)
def _binder(count: int) -> Callable[..., RowRead]:
    names = ", ".join(f"n{k}" for k in range(count))
    columns = ", ".join(f"c{k}" for k in range(count))
    items = ", ".join(f"n{k}: c{k}[index]" for k in range(count))
    source = (
        f"def bind(size, out_of_range, {names}{', ' if count else ''}{columns}):\n"
        "    def read(index):\n"
        "        if not 0 <= index < size:\n"
        "            out_of_range(index)\n"
        f"        return {{{items}}}\n"
        "    return read\n"
    )
    scope: dict[str, Any] = {}
    exec(compile(source, f"<parquet row reader of {count} columns>", "exec"), scope)  # noqa: S102
    bind: Callable[..., RowRead] = scope["bind"]
    return bind


def row_reader(
    names: Sequence[str], columns: Sequence[Any], size: int, out_of_range: Callable[[int], Any]
) -> RowRead:
    """``read(index)``: ``{names[k]: columns[k][index]}``; an index outside ``[0, size)`` calls
    ``out_of_range(index)``, which raises."""
    return _binder(len(names))(size, out_of_range, *names, *columns)


__all__ = ["RowRead", "row_reader"]
