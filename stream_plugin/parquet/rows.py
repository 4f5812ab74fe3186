"""``row_reader``: one sample of decoded columns as a dict, compiled for the columns' kinds.

The per-sample hot path: ``{name_0: column_0[index], ...}`` written out (no loop, no generator), with
a string or binary ``BufferColumn`` sliced in place (``data[offsets[index]:offsets[index + 1]]``,
decoded for text). The names and columns are bound as arguments, so the generated source holds no
user text; one source per tuple of kinds is compiled once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal

from stream_plugin.parquet.decode import BufferColumn

RowRead = Callable[[int], dict[str, Any]]
Kind = Literal["value", "text", "bytes"]


def _item(number: int, kind: Kind) -> tuple[str, str]:
    """The parameters of column ``number`` and its ``key: value`` in the sample dict."""
    if kind == "value":
        return f"c{number}", f"n{number}: c{number}[index]"
    cell = f"d{number}[o{number}[index] : o{number}[index + 1]]"
    return f"o{number}, d{number}", f"n{number}: {cell}.decode()" if kind == "text" else f"n{number}: {cell}"


@lru_cache(maxsize=256)
def _binder(kinds: tuple[Kind, ...]) -> Callable[..., RowRead]:
    names = [f"n{k}" for k in range(len(kinds))]
    pieces = [_item(k, kind) for k, kind in enumerate(kinds)]
    parameters = ", ".join(["size", "out_of_range", *names, *(parameter for parameter, _ in pieces)])
    items = ", ".join(item for _, item in pieces)
    source = (
        f"def bind({parameters}):\n"
        "    def read(index):\n"
        "        if not 0 <= index < size:\n"
        "            out_of_range(index)\n"
        f"        return {{{items}}}\n"
        "    return read\n"
    )
    scope: dict[str, Any] = {}
    exec(compile(source, f"<parquet row reader of {len(kinds)} columns>", "exec"), scope)  # noqa: S102
    bind: Callable[..., RowRead] = scope["bind"]
    return bind


def _kind(column: Any) -> Kind:
    if isinstance(column, BufferColumn):
        return "text" if column.text else "bytes"
    return "value"


def row_reader(
    names: Sequence[str], columns: Sequence[Any], size: int, out_of_range: Callable[[int], Any]
) -> RowRead:
    """``read(index)``: ``{names[k]: columns[k][index]}``; an index outside ``[0, size)`` calls
    ``out_of_range(index)``, which raises."""
    kinds = tuple(_kind(column) for column in columns)
    arguments: list[Any] = []
    for column, kind in zip(columns, kinds):
        arguments += [column] if kind == "value" else [column.offsets, column.data]
    return _binder(kinds)(size, out_of_range, *names, *arguments)


__all__ = ["RowRead", "row_reader"]
