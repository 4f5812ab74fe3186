"""The per-sample read of an MDS shard, written out once for its column layout.

A shuffled pass of small samples calls ``read`` once per sample from a different place in a different
shard, so the read's own steps cost more than the copy of a 1 KiB sample. A loop over the columns that
branches on each column's kind, and a list of Python ints for the offsets, cost about a fifth of the
read (1 KiB samples, 31 shards, random order: 1.3 against 1.1 µs a sample). So ``compile_read`` writes
the read of one layout as straight-line code, the way ``dataclasses`` and ``collections.namedtuple``
write their methods:

- consecutive fixed-size numeric columns are unpacked by one ``struct`` call, the variable sizes by
  another, and bytes columns are one slice of the map each;
- the offsets are read from the shard's own offset table, through a ``uint32`` view of the map.

The generated source holds only names this module makes (``v0``, ``n0``, ``u1`` ...), never a column
name or any other text from the index: those reach it as arguments. It depends only on the layout's
shape, so it is compiled once per shape and a shard's read is one call of the compiled ``bind``.
"""

from __future__ import annotations

import functools
import mmap
import operator
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from stream_plugin.errors import ShardIntegrityError
from stream_plugin.format.encodings import ColumnEncoding, keep_view

SampleRead = Callable[[int], dict[str, Any]]


def offset_view(view: memoryview, samples: int) -> Sequence[int]:
    """The ``samples + 1`` sample offsets of a shard (``uint32`` from byte 4) as a view of the map, each
    read as a Python int when indexed. A copy into a list where the machine is not little-endian."""
    table = view[4 : 4 + 4 * (samples + 1)]
    if sys.byteorder == "little":
        return table.cast("I")
    return list(struct.unpack(f"<{samples + 1}I", table))


def compile_read(
    names: Sequence[str],
    encodings: Sequence[ColumnEncoding],
    sizes: Sequence[int | None],
    *,
    offsets: Sequence[int],
    view: memoryview,
    raw: mmap.mmap | bytes,
    num_samples: int,
    source: str,
) -> SampleRead:
    """``read(index)``: sample ``index`` of the shard, decoded column by column into a dict (``names``
    in order), equal to each ``encoding.decode`` of the column's bytes.

    ``offsets`` are the shard's sample offsets into ``view`` (the map) and ``raw`` (the map itself:
    slicing it copies straight into ``bytes``). An index outside ``[0, num_samples)`` raises
    ``IndexError``, a sample whose columns do not end where the next sample begins
    ``ShardIntegrityError``; ``source`` names the shard in both.
    """

    def out_of_range(index: int) -> NoReturn:
        raise index_error(source, num_samples, index)

    def corrupt(index: int, begin: int, end: int, position: int) -> NoReturn:
        raise ShardIntegrityError(
            f"{source}: expected sample {index} to span {end - begin} bytes, found its columns take "
            f"{position - begin}; the shard is corrupt, download it again"
        )

    # Everything the read uses is an argument of ``bind``, so the source depends only on the layout's
    # shape (which columns are bytes, struct runs or decoded, and their sizes): it is compiled once per
    # shape, and opening a shard costs one call of ``bind`` (compiling costs about 0.2 ms).
    values: dict[str, Any] = {
        "offsets": offsets,
        "view": view,
        "raw": raw,
        "num_samples": num_samples,
        "out_of_range": out_of_range,
        "corrupt": corrupt,
    }
    variable_count = sum(size is None for size in sizes)
    lines = [
        "if index < 0 or index >= num_samples:",
        "    out_of_range(index)",
        "begin = offsets[index]",
        "end = offsets[index + 1]",
    ]
    if variable_count:
        values["head"] = struct.Struct(f"<{variable_count}I").unpack_from
        lines.append(f"{''.join(f's{i}, ' for i in range(variable_count))}= head(view, begin)")
    # The position of the next column: the variable ``base`` plus ``step`` bytes.
    base, step = "begin", 4 * variable_count
    variable = 0
    column = 0
    while column < len(names):
        encoding, size = encodings[column], sizes[column]
        size = None if size is None else operator.index(size)  # only ints ever reach the source
        at = f"{base} + {step}"
        if size is None:
            stop = f"p{column}"
            lines.append(f"{stop} = {at} + s{variable}")
            lines.append(f"if {stop} > end:")  # a corrupt size: say so before reading past the sample
            lines.append(f"    corrupt(index, begin, end, {stop})")
            variable += 1
            lines.append(f"v{column} = {_slice(values, column, encoding, at, stop)}")
            base, step = stop, 0
            column += 1
            continue
        if encoding.struct_format is not None:
            run = _struct_run(encodings, sizes, column)
            values[f"u{column}"] = struct.Struct("<" + "".join(_field(encodings[i]) for i in run)).unpack_from
            lines.append(f"{''.join(f'v{i}, ' for i in run)}= u{column}(view, {at})")
            step += sum(sizes[i] or 0 for i in run)
            column = run[-1] + 1
            continue
        lines.append(f"v{column} = {_slice(values, column, encoding, at, f'{at} + {size}')}")
        step += size
        column += 1
    lines.append(f"if {base} + {step} != end:")
    lines.append(f"    corrupt(index, begin, end, {base} + {step})")
    for column, name in enumerate(names):
        values[f"n{column}"] = name
    lines.append("return {" + ", ".join(f"n{i}: v{i}" for i in range(len(names))) + "}")
    code = "\n".join(
        [f"def bind({', '.join(values)}):", "    def read(index):", *(" " * 8 + line for line in lines), "    return read"]
    )
    read: SampleRead = _compiled(code)(**values)
    return read


@functools.lru_cache(maxsize=256)
def _compiled(code: str) -> Callable[..., SampleRead]:
    """The ``bind`` function of ``code`` (built by ``compile_read`` from its own names only)."""
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # noqa: S102 - no text from the index reaches the source
    bind: Callable[..., SampleRead] = namespace["bind"]
    return bind


def index_error(source: str, num_samples: int, index: int) -> IndexError:
    return IndexError(f"{source}: expected a sample index in [0, {num_samples}), found {index}")


def _slice(values: dict[str, Any], column: int, encoding: ColumnEncoding, start: str, stop: str) -> str:
    """The expression that decodes a column's bytes ``[start, stop)``: a ``bytes`` column is one slice
    of the map (one copy), or of its view when read without a copy (``keep_view``); any other goes
    through its ``decode`` on a view."""
    if encoding.decode is bytes:
        return f"raw[{start}:{stop}]"
    if encoding.decode is keep_view:
        return f"view[{start}:{stop}]"
    values[f"d{column}"] = encoding.decode
    return f"d{column}(view[{start}:{stop}])"


def _struct_run(encodings: Sequence[ColumnEncoding], sizes: Sequence[int | None], first: int) -> list[int]:
    """The columns from ``first`` on that one ``struct`` call can unpack: fixed-size, with a format."""
    run = [first]
    while (
        run[-1] + 1 < len(encodings)
        and sizes[run[-1] + 1] is not None
        and encodings[run[-1] + 1].struct_format is not None
    ):
        run.append(run[-1] + 1)
    return run


def _field(encoding: ColumnEncoding) -> str:
    """The field of a single-field little-endian struct format ("<q" -> "q")."""
    form = encoding.struct_format or ""
    if not form.startswith("<") or struct.calcsize(form) != encoding.size:
        raise ValueError(
            f"encoding {encoding.name!r}: expected a little-endian struct format of {encoding.size} bytes, "
            f"found {form!r}"
        )
    return form[1:]
