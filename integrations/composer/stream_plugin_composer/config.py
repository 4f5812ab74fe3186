"""From a YAML ``train_loader`` section to ``StreamingDataset`` and ``StreamingDataLoader`` arguments.

The section looks like llm-foundry's: ``dataset`` holds the dataset's arguments (with ``streams`` as a
mapping of name to stream arguments, or a list), and the loader's arguments sit beside it. Unknown
keys are errors, so a typo never silently falls back to a default that changes the sample order.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stream_plugin import ConfigError, Stream, StreamingDataset
from stream_plugin.units import parse_whole_number


def _parameters(callable_: Callable[..., Any]) -> list[str]:
    return [
        name
        for name, parameter in inspect.signature(callable_).parameters.items()
        if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD) and name != "self"
    ]


# The dataset's arguments, read from its signature: the options of ``stream_plugin.reading.config.DatasetConfig``
# (whose named choices come from the ``order`` registries and are checked when the dataset is built) plus
# the streams, the download defaults, the world and the transform. Nothing here lists them again.
DATASET_KEYS: tuple[str, ...] = tuple(_parameters(StreamingDataset.__init__))
STREAM_KEYS: tuple[str, ...] = tuple(_parameters(Stream.__init__))


def _plain(value: Any) -> Any:
    """Nested mappings/sequences as plain dicts/lists (llm-foundry may hand over omegaconf containers)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(item) for item in value]
    return value


def _check_keys(where: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{where}: expected keys among {sorted(allowed)}, found unknown {unknown}; fix the spelling or "
            "remove them (llm-foundry's text keys such as max_seq_len turn on tokenized model inputs)"
        )


def build_stream(name: str, arguments: Mapping[str, Any]) -> Stream:
    """One ``Stream`` from its YAML mapping, with ``name`` only used in error messages."""
    if not isinstance(arguments, Mapping):
        raise ConfigError(
            f"streams[{name!r}]: expected a mapping of Stream arguments (remote, local, proportion, ...), "
            f"found {type(arguments).__name__}"
        )
    _check_keys(f"streams[{name!r}]", arguments, STREAM_KEYS)
    return Stream(**arguments)


def build_streams(streams: Any) -> list[Stream]:
    """``streams`` as llm-foundry writes it (name -> arguments) or as a list of argument mappings."""
    if isinstance(streams, Mapping):
        return [build_stream(str(name), arguments) for name, arguments in streams.items()]
    if isinstance(streams, list):
        return [build_stream(str(index), arguments) for index, arguments in enumerate(streams)]
    raise ConfigError(
        f"dataset.streams: expected a mapping of stream name to arguments, or a list of them, found "
        f"{type(streams).__name__}"
    )


def dataset_arguments(dataset: Mapping[str, Any], extra_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Keyword arguments for ``StreamingDataset`` (plus ``extra_keys``) from the YAML ``dataset`` mapping."""
    if not isinstance(dataset, Mapping):
        raise ConfigError(
            f"train_loader.dataset: expected a mapping of StreamingDataset arguments, found "
            f"{type(dataset).__name__}; write e.g. dataset: {{remote: s3://bucket/data, local: /tmp/data}}"
        )
    arguments = _plain(dataset)
    _check_keys("train_loader.dataset", arguments, (*DATASET_KEYS, *extra_keys))
    if "batch_size" in arguments:
        raise ConfigError(
            "train_loader.dataset.batch_size: expected it unset (the per-device batch size comes from "
            f"device_batch_size), found {arguments['batch_size']!r}; remove it"
        )
    if arguments.get("streams") is not None:
        arguments["streams"] = build_streams(arguments["streams"])
    return arguments


def device_batch_size_of(value: Any) -> int:
    """llm-foundry passes ``device_batch_size`` as int or float; ours must be a whole number >= 1."""
    return parse_whole_number(
        value,
        name="device_batch_size",
        meaning="global batch size / number of ranks",
        fix="make the global batch size divisible by the number of ranks",
    )


def resolve_callable(spec: str | Callable[..., Any] | None, *, name: str) -> Callable[..., Any] | None:
    """A callable given directly or as ``"package.module:attribute"`` (YAML cannot hold functions)."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(
            f"{name}: expected a callable or a 'package.module:function' string, found {spec!r}"
        )
    module_name, _, attribute = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            f"{name}: expected an importable 'module:attribute', found {spec!r} ({error}); check the module "
            "is on PYTHONPATH and the name is spelled right"
        ) from error
    if not callable(target):
        raise ConfigError(f"{name}: expected {spec!r} to name a callable, found {type(target).__name__}")
    return target
