"""``hf_dataset_to_mds``: write a Hugging Face ``datasets.Dataset`` as an MDS dataset.

The dataset may be in memory, loaded from local Parquet/JSON/CSV files with ``datasets.load_dataset``,
or a folder written by ``Dataset.save_to_disk`` (pass its path). Columns are inferred from the
dataset's Features (see ``hf_features``) unless given. Nothing here touches the network.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from stream_plugin.converters.hf_features import infer_columns, value_converter
from stream_plugin.converters.reporting import ConversionProgress, ConversionSummary
from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.format.writer import MDSWriter

__all__ = ["hf_dataset_to_mds", "is_saved_dataset", "load_saved_dataset"]

_CALLER = "hf_dataset_to_mds"
_BATCH_ROWS = 1000


def _datasets_module() -> Any:
    try:
        import datasets
    except ImportError as error:
        raise MissingDependencyError(
            f"{_CALLER}: expected the datasets package, found it missing; run `pip install 'stream-plugin[hf]'`"
        ) from error
    return datasets


def is_saved_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk``."""
    folder = Path(path)
    return folder.is_dir() and (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file()


def load_saved_dataset(path: str | os.PathLike[str]) -> Any:
    """The Dataset saved at ``path`` (memory-mapped Arrow files; nothing is copied)."""
    datasets = _datasets_module()
    folder = Path(path)
    if (folder / "dataset_dict.json").is_file():
        splits = sorted(child.name for child in folder.iterdir() if child.is_dir())
        raise ConfigError(
            f"{_CALLER}: expected one saved split, found a DatasetDict at {folder} with splits {splits}; pass "
            f"one of its split folders, such as {folder / splits[0] if splits else folder / 'train'}"
        )
    if not is_saved_dataset(folder):
        raise ConfigError(
            f"{_CALLER}: expected a folder written by Dataset.save_to_disk (with state.json and "
            f"dataset_info.json), found {folder}; save the dataset first or pass the Dataset itself"
        )
    return datasets.load_from_disk(str(folder))


def _as_dataset(dataset: Any) -> Any:
    if isinstance(dataset, (str, os.PathLike)):
        return load_saved_dataset(dataset)
    datasets = _datasets_module()
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise ConfigError(
            f"{_CALLER}: expected one split (a Dataset), found a DatasetDict with splits {sorted(dataset)}; "
            "pass dataset['train'] (or another split)"
        )
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise ConfigError(
            f"{_CALLER}: expected a datasets.Dataset or the path of a saved one, found "
            f"{type(dataset).__name__}; build it with datasets.load_dataset or Dataset.from_dict"
        )
    return dataset


def _samples(dataset: Any, columns: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    converters = {name: value_converter(encoding) for name, encoding in columns.items()}
    for batch in dataset.select_columns(list(columns)).iter(batch_size=_BATCH_ROWS):
        rows = len(next(iter(batch.values())))
        for row in range(rows):
            sample = {}
            for name, convert in converters.items():
                value = batch[name][row]
                sample[name] = value if convert is None or value is None else convert(value)
            yield sample


def hf_dataset_to_mds(
    dataset: Any,
    out: str | tuple[str, str],
    *,
    columns: Mapping[str, str] | None = None,
    compression: str | None = None,
    hashes: list[str] | None = None,
    size_limit: int | str | None = 1 << 26,
    keep_local: bool = False,
    exist_ok: bool = False,
    progress: bool = True,
) -> int:
    """Write every row of ``dataset`` (a Dataset or a saved one's path) as MDS under ``out``; returns the count.

    ``columns`` maps the columns to write to MDS encodings; when omitted every column is written with
    the encoding its feature maps to. The other arguments are MDSWriter's.
    """
    dataset = _as_dataset(dataset)
    features = dataset.features
    if features is None:
        raise ConfigError(
            f"{_CALLER}: expected a dataset with known Features, found none (an IterableDataset before its "
            "first row); pass columns={...} or call dataset._resolve_features()"
        )
    if columns is None:
        columns = infer_columns(features)
    else:
        missing = sorted(set(columns) - set(features))
        if missing:
            raise ConfigError(
                f"{_CALLER}: columns names {missing}, expected columns of the dataset {list(features)}; fix "
                "the names or rename the dataset's columns"
            )
    total = len(dataset) if isinstance(dataset, _datasets_module().Dataset) else None
    display = ConversionProgress(total, label="convert", enabled=progress)
    started = time.monotonic()
    with MDSWriter(
        out=out,
        columns=dict(columns),
        compression=compression,
        hashes=hashes,
        size_limit=size_limit,
        keep_local=keep_local,
        exist_ok=exist_ok,
    ) as writer:
        for sample in _samples(dataset, columns):
            writer.write(sample)
            display.advance(1, writer.stored_bytes)
    display.close()
    summary = ConversionSummary(
        parts=1, samples=display.samples, stored_bytes=writer.stored_bytes, seconds=time.monotonic() - started
    )
    summary.report(_CALLER, str(out), show=progress)
    return display.samples
