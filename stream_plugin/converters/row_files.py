"""Convert row files (JSON lines, CSV, TSV, Parquet) into MDS shards.

Column encodings are inferred from the rows unless the user names them: ints become ``int``, floats
``float64``, text ``str``, bytes ``bytes`` and nested values ``json``.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stream_plugin.errors import ConfigError, MissingDependencyError

_INFER_ROWS = 1000
Row = dict[str, Any]


def parse_columns(text: str) -> dict[str, str]:
    """Parse ``'text:str,label:int'`` into a columns mapping."""
    columns: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, encoding = item.partition(":")
        if not sep or not name or not encoding:
            raise ConfigError(
                f"--columns: expected name:encoding pairs such as 'text:str,label:int', found {item!r}"
            )
        columns[name] = encoding
    return columns


def _value_encoding(value: Any) -> str:
    if isinstance(value, bool):
        return "json"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    return "json"


def infer_columns(rows: list[Row], *, source: str) -> dict[str, str]:
    """Pick one encoding per column that fits every row seen; int and float mix to ``float64``."""
    if not rows:
        raise ConfigError(f"{source}: expected at least one row to infer columns from, found an empty file")
    found: dict[str, set[str]] = {}
    for row in rows:
        for name, value in row.items():
            if value is not None:
                found.setdefault(name, set()).add(_value_encoding(value))
    columns = {}
    for name, kinds in sorted(found.items()):
        if len(kinds) == 1:
            columns[name] = kinds.pop()
        elif kinds <= {"int", "float64"}:
            columns[name] = "float64"
        else:
            columns[name] = "json"
    return columns


def _text_row_types(rows: list[dict[str, str]]) -> dict[str, str]:
    def kind(text: str) -> str:
        for cast, name in ((int, "int"), (float, "float64")):
            try:
                cast(text)
                return name
            except ValueError:
                continue
        return "str"

    columns: dict[str, str] = {}
    for name in rows[0] if rows else {}:
        kinds = {kind(row[name]) for row in rows}
        columns[name] = (
            kinds.pop() if len(kinds) == 1 else ("float64" if kinds <= {"int", "float64"} else "str")
        )
    return columns


def _read_json_lines(path: Path) -> Iterator[Row]:
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ConfigError(
                    f"{path}:{line_number}: expected one JSON object per line, found invalid JSON ({error})"
                ) from error
            if not isinstance(row, dict):
                raise ConfigError(
                    f"{path}:{line_number}: expected a JSON object per line, found {type(row).__name__}"
                )
            yield row


def _read_delimited(path: Path, delimiter: str) -> Iterator[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        yield from csv.DictReader(handle, delimiter=delimiter)


def _read_parquet(path: Path) -> Iterator[Row]:
    try:
        import pyarrow.parquet as parquet
    except ImportError as error:
        raise MissingDependencyError(
            f"{path}: reading Parquet needs pyarrow, which is not installed; run "
            "pip install 'stream-plugin[parquet]' (or pip install pyarrow)"
        ) from error
    for batch in parquet.ParquetFile(path).iter_batches():
        yield from batch.to_pylist()


def _rows(path: Path) -> tuple[Iterator[Row], bool]:
    """The rows of ``path`` and whether their values are text that needs casting."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _read_json_lines(path), False
    if suffix == ".csv":
        return _read_delimited(path, ","), True
    if suffix == ".tsv":
        return _read_delimited(path, "\t"), True
    if suffix == ".parquet":
        return _read_parquet(path), False
    raise ConfigError(
        f"{path}: expected a .jsonl, .json, .csv, .tsv or .parquet file, found suffix {suffix!r}; rename the "
        "file or convert it to one of these first"
    )


def _cast(row: Row, columns: dict[str, str]) -> Row:
    casts = {"int": int, "float64": float, "float32": float, "str": str}
    return {name: casts.get(encoding, str)(row[name]) for name, encoding in columns.items()}


def file_columns(path: str | Path, columns: str | dict[str, str] | None = None) -> dict[str, str]:
    """The columns to write ``path`` with: parsed from ``columns``, or inferred from its first rows."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: expected an input file, found nothing there; check the path")
    if isinstance(columns, str):
        columns = parse_columns(columns)
    if columns is None:
        rows, is_text = _rows(path)
        head = list(itertools.islice(rows, _INFER_ROWS))
        columns = _text_row_types(head) if is_text else infer_columns(head, source=str(path))
    if not columns:
        raise ConfigError(f"{path}: expected at least one column, found none; pass --columns")
    return columns


def file_samples(path: str | Path, columns: dict[str, str]) -> Iterator[Row]:
    """The samples of one row file, each holding ``columns`` (text values cast to their encodings)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: expected an input file, found nothing there; check the path")
    rows, is_text = _rows(path)
    for row in rows:
        yield _cast(row, columns) if is_text else {name: row.get(name) for name in columns}
