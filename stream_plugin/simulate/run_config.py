"""``RunConfig``: a CONFIG file as read, before the simulator's inputs are built from it.

Every reader of CONFIG (the dataset's arguments here in ``config``, a framework's YAML in
``config_readers``) returns one, and checks its keys against the tables below: the dataset's own
arguments, read from the classes that define them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from stream_plugin.errors import ConfigError
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.reading.stream import DownloadSettings, Stream

# The dataset's arguments a CONFIG may hold, read from the classes that define them: the options of
# DatasetConfig, the download defaults of DownloadSettings, and where the data is (Stream's own).
OPTION_KEYS: tuple[str, ...] = tuple(item.name for item in fields(DatasetConfig))
DOWNLOAD_KEYS: tuple[str, ...] = tuple(item.name for item in fields(DownloadSettings))
STREAM_KEYS: tuple[str, ...] = tuple(
    name for name in inspect.signature(Stream.__init__).parameters if name != "self"
)
LOCATION_KEYS: tuple[str, ...] = ("streams", "remote", "local", "split", "storage_options")
DATASET_KEYS: tuple[str, ...] = (*LOCATION_KEYS, *DOWNLOAD_KEYS, *OPTION_KEYS)
# Keys the integrations' specs add to the dataset's arguments that do not change what is read.
SPEC_ONLY_KEYS: tuple[str, ...] = ("stream_name", "stream_config", "transform")

# The ranks a global batch size is divided over: the data-parallel ones (our DataModule, the CLI's
# --global-batch-size), or every rank (llm-foundry's global_train_batch_size).
BatchRanks = Literal["data_parallel", "world"]


@dataclass(frozen=True)
class RunConfig:
    """A CONFIG read: the dataset's arguments, and what the file says of the hardware and the run."""

    kind: str  # "dataset", "synthetic", or the name of the framework reader that read it
    source: str  # the file (or "CONFIG" for a mapping), for messages
    dataset: Mapping[str, Any]  # StreamingDataset arguments, streams as mappings
    synthetic: Mapping[str, Any] | None = None
    global_batch_size: int | None = None
    hardware: Mapping[str, Any] = field(default_factory=dict)  # Hardware fields the file sets
    max_duration: str | None = None
    global_batch_over: BatchRanks = "data_parallel"


def check_keys(where: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    """Refuse keys of ``given`` outside ``allowed``, listing the allowed ones."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{where}: expected keys among {sorted(allowed)}, found unknown {unknown}; fix the spelling or remove them"
        )


def as_mapping(where: str, value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping; else a ``ConfigError`` naming ``where``."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping of keys to values, found {type(value).__name__} {value!r}"
        )
    return value


__all__ = [
    "DATASET_KEYS",
    "DOWNLOAD_KEYS",
    "LOCATION_KEYS",
    "OPTION_KEYS",
    "SPEC_ONLY_KEYS",
    "STREAM_KEYS",
    "BatchRanks",
    "RunConfig",
    "as_mapping",
    "check_keys",
]
