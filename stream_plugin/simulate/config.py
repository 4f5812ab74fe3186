"""``stream-plugin simulate``'s inputs: a CONFIG file read into a ``Workload``, and options into ``Hardware``.

CONFIG is one of these shapes, told apart by their top-level keys (YAML or JSON):

- the dataset's arguments, as ``StreamingDataset`` takes them (``remote``/``local``/``split`` or
  ``streams``, ``batch_size``, ``shuffle``, ``cache_limit``, ...); or an ``index.json``, a folder that
  holds one, or a URL of one (CONFIG itself is then the one stream);
- ``synthetic``: a shape without data (``shards``, ``samples_per_shard``, ``raw_bytes_per_shard``,
  ``stored_bytes_per_shard``), beside the same dataset settings;
- a training framework's YAML, read by the reader that claims it (``config_readers``: a LightningCLI
  YAML whose ``data`` is our ``StreamingDataModule``, an llm-foundry YAML whose ``train_loader`` is ours).

Every shard's size comes from its stream's ``index.json`` (only that file is read, never a shard). The
option names and defaults are ``DatasetConfig``'s and ``Hardware``'s own; ``OPTIONS`` is the one table of
the command-line options, read by the parser and by the tests of ``--help``.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from stream_plugin.cache.eviction import footprint
from stream_plugin.cache.future import EVICTION_POLICIES
from stream_plugin.errors import ConfigError, StreamPluginError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry, parse_index
from stream_plugin.order.data_parallel import DATA_PARALLEL_DIM_NAMES
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.reading.stream import DownloadSettings, Stream
from stream_plugin.reading.stream_registry import build_streams
from stream_plugin.simulate.config_readers import reader_for
from stream_plugin.simulate.model import INDEX_BYTES_PER_SHARD, Hardware, Workload
from stream_plugin.simulate.reads import epoch_steps
from stream_plugin.simulate.run_config import (
    DATASET_KEYS,
    DOWNLOAD_KEYS,
    OPTION_KEYS,
    STREAM_KEYS,
    RunConfig,
    as_mapping,
    check_keys,
)
from stream_plugin.units import parse_bytes, parse_count

SYNTHETIC_KEYS: tuple[str, ...] = tuple(
    name
    for name, parameter in inspect.signature(Workload.synthetic).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY and name not in ("config", "keep_zip")
)


# ---------------------------------------------------------------------------------------- options
def _seconds(text: str, name: str) -> float:
    """``0.03``, ``30ms``, ``250us`` or ``2s`` as seconds."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us)?\s*", text)
    try:
        value = float(match.group(1)) if match else math.nan
    except ValueError:
        value = math.nan
    if match is None or not math.isfinite(value):
        raise ConfigError(f"{name}: expected seconds such as 0.03 or 30ms, found {text!r}; pass a number")
    return value * {"s": 1.0, None: 1.0, "ms": 1e-3, "us": 1e-6}[match.group(2)]


def _bytes_per_second(text: str, name: str) -> float:
    """``1.25e9``, ``1.25gb`` (binary units, as every size here) or ``10gbit`` (decimal bits) per second."""
    plain = text.strip().lower().removesuffix("/s").removesuffix("ps")
    bits = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)bit", plain)
    if bits:
        return float(bits.group(1)) * 10 ** (3 * " kmgt".index(bits.group(2) or " ")) / 8
    try:
        return float(plain)
    except ValueError:
        return float(parse_bytes(plain, name=name))


def _number(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, found {text!r}; pass e.g. 100 or 0.5") from None


def _count(text: str, name: str) -> int:
    return parse_count(text, name=name)


def _mesh(text: str, name: str) -> tuple[tuple[str, int], ...]:
    """``pp=2,dp=4,tp=8``: a mesh's dims, outermost first, with their sizes."""
    dims = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]+)\s*", part)
        if match is None or int(match.group(2)) < 1:
            raise ConfigError(
                f"{name}: expected dims as name=size, outermost first, such as pp=2,dp=4,tp=8, found {text!r}; "
                "write each dim's name and size"
            )
        dims.append((match.group(1), int(match.group(2))))
    return tuple(dims)


def _names(text: str, name: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ConfigError(f"{name}: expected one or more dim names such as dp or dp_replicate,dp_shard, found {text!r}")
    return names


def _text(text: str, name: str) -> str:
    return text


OptionGroup = Literal["hardware", "dataset", "run"]


@dataclass(frozen=True)
class Option:
    """One input of ``stream-plugin simulate``: its flag is ``--`` plus ``name`` with dashes."""

    name: str  # the argparse dest; a Hardware field or a DatasetConfig option of the same name
    group: OptionGroup
    unit: str  # shown in --help beside the meaning
    help: str
    read: Callable[[str, str], Any]  # (text, flag) -> value
    sets: tuple[str, ...] = ()  # the Hardware fields it sets, where not just ``name``
    metavar: str = "VALUE"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def hardware_fields(self) -> tuple[str, ...]:
        if self.sets:
            return self.sets
        return (self.name,) if self.group == "hardware" else ()


# One row per option (kept one a line: a table to read down).
# fmt: off
OPTIONS: tuple[Option, ...] = (
    Option("nodes", "hardware", "nodes", "machines in the job", _count, metavar="N"),
    Option("devices_per_node", "hardware", "ranks per node", "GPUs (training processes) on each node", _count, metavar="N"),
    Option("workers", "hardware", "processes per rank", "DataLoader num_workers of each rank (0: the rank reads)", _count, metavar="N"),
    Option("bandwidth", "hardware", "bytes/s per node", "download bandwidth into each node, shared by its downloads: 1.25e9, 1.25gb (binary units) or 10gbit (decimal bits)", _bytes_per_second, metavar="RATE"),
    Option("latency", "hardware", "seconds", "time from a request to its first byte: 0.03 or 30ms", _seconds, metavar="SECONDS"),
    Option("rate_limit", "hardware", "requests/s, whole job", "requests per second the store answers; more get 429 and are retried with backoff", _number, metavar="RATE"),
    Option("decompress_rate", "hardware", "bytes/s per download", "decompressed bytes per second of one download thread (unset: instant); measured by --calibrate", _bytes_per_second, metavar="RATE"),
    Option("sample_time", "hardware", "seconds per sample", "time a worker spends reading and decoding one sample; measured by --calibrate", _seconds, metavar="SECONDS"),
    Option("worker_start", "hardware", "seconds", "time from the first iterator to a worker's first request (fork, its first iterator); measured by --calibrate", _seconds, metavar="SECONDS"),
    Option("handover", "hardware", "seconds per batch", "time to hand a built batch from a worker to the trainer; measured by --calibrate", _seconds, metavar="SECONDS"),
    Option("step_time", "hardware", "seconds per step", "compute time of one training step (one batch on every rank)", _seconds, metavar="SECONDS"),
    Option("step_time_per_sample", "hardware", "seconds per sample", "compute time added per sample of a device batch", _seconds, metavar="SECONDS"),
    Option("download_threads", "hardware", "downloads per worker", "concurrent downloads of one worker", _count, metavar="N"),
    Option("prefetch_factor", "hardware", "batches per worker", "batches each DataLoader worker keeps ready (DataLoader prefetch_factor)", _count, metavar="N"),
    Option("data_parallel_size", "hardware", "ranks", "ranks that read different samples; the others replicate them on consecutive ranks (tensor, context parallel)", _count, metavar="N"),
    Option("mesh", "hardware", "dims outermost first", "the job's DeviceMesh, which ranks fill row-major: pp=2,dp=4,tp=8 (its data-parallel dims read different samples)", _mesh, metavar="DIMS"),
    Option("data_parallel_dims", "hardware", "dim names", f"with --mesh: the dims that read different samples (default: those named {','.join(DATA_PARALLEL_DIM_NAMES)})", _names, metavar="NAMES"),
    Option("epochs", "hardware", "epochs", "epochs to simulate", _count, metavar="N"),
    Option("max_duration", "run", "steps (ba), epochs (ep) or samples (sp)", "how long the run is, as Composer writes it: 1000ba, 2ep or 64000sp (instead of --epochs)", _text, sets=("epochs", "max_steps"), metavar="DURATION"),
    Option("batch_size", "dataset", "samples per device", "per-device batch size (the dataset's batch_size)", _count, metavar="N"),
    Option("global_batch_size", "dataset", "samples per step", "batch size over all data-parallel ranks (instead of --batch-size)", _count, metavar="N"),
    Option("cache_limit", "dataset", "bytes per node", "the dataset's cache_limit: 100gb, 1.5tb or a byte count", _text, metavar="SIZE"),
    Option("eviction", "dataset", "policy name", f"which shard leaves a full cache: {' or '.join(EVICTION_POLICIES)}", _text, metavar="POLICY"),
    Option("predownload", "dataset", "samples per worker", "the dataset's predownload: samples each worker downloads ahead", _count, metavar="N"),
    Option("start_stagger", "dataset", "seconds", "the dataset's start_stagger: spread the nodes' first shard downloads over this long (node i starts i/nodes of it late)", _seconds, metavar="SECONDS"),
    Option("first_shards", "dataset", "downloads per node", "the dataset's first_shards: at most this many of a node's first-shard downloads at once", _count, metavar="N"),
    Option("num_canonical_nodes", "dataset", "canonical nodes", "the dataset's num_canonical_nodes (default: the number of nodes)", _count, metavar="N"),
    Option("target_throughput", "run", "samples/s", "with --tune: the mean throughput a setting must reach (unset: no stalled step)", _number, metavar="RATE"),
    Option("target_first_batch", "run", "seconds", "with --tune: search the start-up (staggered first downloads, fewer first shards at once) for a first batch within this", _seconds, metavar="SECONDS"),
    Option("egress_price_per_gb", "run", "dollars per 10^9 bytes", "price of egress, for the cost in the report", _number, metavar="DOLLARS"),
)
# fmt: on


def read_options(given: Mapping[str, str | None]) -> dict[str, Any]:
    """The options given on the command line (None: not given), each read into its value and unit."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        text = given.get(option.name)
        if text is not None:
            values[option.name] = option.read(text, option.flag)
    return values


# ---------------------------------------------------------------------------------------- CONFIG files
def _load_text(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"CONFIG: expected a YAML or JSON file, a dataset folder or index.json, found nothing at {path}; "
            "check the path"
        ) from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(
                f"{path}: expected JSON, found a syntax error ({error}); fix the file"
            ) from None
    from stream_plugin.extras import require_extra

    yaml = require_extra("yaml", extra="simulate", needed_by="reading a YAML CONFIG")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = " ".join(str(error).split())
        raise ConfigError(
            f"{path}: expected YAML, found text it cannot read ({where}); fix the file"
        ) from None


_REFERENCE = re.compile(r"\$\{([\w.]+)\}")


def _interpolate(value: Any, root: Mapping[str, Any]) -> Any:
    """Resolve omegaconf's ``${a.b}`` references (llm-foundry's ``variables``) against ``root``."""
    if isinstance(value, Mapping):
        return {key: _interpolate(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, root) for item in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(path: str) -> Any:
        found: Any = root
        for part in path.split("."):
            if not isinstance(found, Mapping) or part not in found:
                raise ConfigError(
                    f"${{{path}}}: expected a key of the file, found none; define it or write the value"
                )
            found = found[part]
        return _interpolate(found, root)

    whole = _REFERENCE.fullmatch(value)
    if whole:
        return lookup(whole.group(1))
    return _REFERENCE.sub(lambda match: str(lookup(match.group(1))), value)


def read_config(source: str | Path | Mapping[str, Any]) -> RunConfig:
    """Read CONFIG: a YAML/JSON file of a shape above, an ``index.json``, a dataset folder or URL."""
    if isinstance(source, Mapping):
        return _classify(dict(source), "CONFIG")
    text = str(source)
    if "://" in text:
        return RunConfig(kind="dataset", source=text, dataset={"remote": text})
    path = Path(text)
    if path.is_dir() or path.name == INDEX_BASENAME:
        folder = path if path.is_dir() else path.parent
        return RunConfig(kind="dataset", source=text, dataset={"local": str(folder)})
    document = _load_text(path)
    return _classify(dict(as_mapping(text, document)), text)


def _classify(document: dict[str, Any], source: str) -> RunConfig:
    document = _interpolate(document, document)
    reader = reader_for(document)  # a training framework's YAML (config_readers)
    if reader is not None:
        return reader.read(document, source)
    if "synthetic" in document:
        settings = {key: value for key, value in document.items() if key != "synthetic"}
        check_keys(source, settings, (*DOWNLOAD_KEYS, *OPTION_KEYS, "synthetic"))
        shape = as_mapping(f"{source}: synthetic", document["synthetic"])
        check_keys(f"{source}: synthetic", shape, SYNTHETIC_KEYS)
        return RunConfig(kind="synthetic", source=source, dataset=settings, synthetic=shape)
    check_keys(source, document, DATASET_KEYS)
    return RunConfig(kind="dataset", source=source, dataset=document)


# ---------------------------------------------------------------------------------------- the workload
def _split(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(DatasetConfig options, where the data is and how it downloads)."""
    options = {key: value for key, value in arguments.items() if key in OPTION_KEYS}
    rest = {key: value for key, value in arguments.items() if key not in OPTION_KEYS}
    return options, rest


def _per_device(
    run: RunConfig,
    options: Mapping[str, Any],
    overrides: Mapping[str, Any],
    world_size: int,
    data_parallel_size: int | None = None,
) -> Any:
    """The per-device batch size: given (the command line's first), else the global batch over the ranks."""
    if overrides.get("batch_size") is not None:
        return overrides["batch_size"]
    if overrides.get("global_batch_size") is not None:
        global_size = overrides["global_batch_size"]
    elif options.get("batch_size") is not None:
        return options["batch_size"]
    else:
        global_size = run.global_batch_size
    if global_size is None:
        return None
    global_size = parse_count(global_size, name="global_batch_size")
    if run.global_batch_over == "world":
        ranks = world_size
    elif data_parallel_size is not None:
        ranks = data_parallel_size
    else:
        ranks = world_size // int(options.get("replication") or 1)
    if ranks < 1 or global_size % ranks:
        raise ConfigError(
            f"global_batch_size: expected a multiple of the {ranks} data-parallel ranks, found {global_size}; "
            "pass a global batch size they divide, or --batch-size"
        )
    return global_size // ranks


def dataset_config(
    run: RunConfig, overrides: Mapping[str, Any], *, world_size: int, data_parallel_size: int | None = None
) -> DatasetConfig:
    """The dataset's settings: the file's, then ``overrides`` (option names as keys), validated once."""
    options, _ = _split(run.dataset)
    options.update({key: value for key, value in overrides.items() if key in OPTION_KEYS})
    options["batch_size"] = _per_device(run, options, overrides, world_size, data_parallel_size)
    if options["batch_size"] is None:
        raise ConfigError(
            f"batch_size: expected the per-device batch size in {run.source} or as --batch-size, found none; "
            "pass --batch-size or --global-batch-size"
        )
    return DatasetConfig.from_arguments(**options)


@dataclass(frozen=True)
class StreamIndex:
    """One stream of the dataset as simulate reads it: where its shards are, and its index's entries."""

    location: str  # the remote folder, or the local one for a local-only stream
    storage_options: Mapping[str, Any]
    keep_zip: bool
    entries: Sequence[ShardEntry]
    index_bytes: int = 0  # the bytes of its index.json, which every node downloads once


def _streams(arguments: Mapping[str, Any]) -> list[Stream]:
    given = arguments.get("streams")
    if given is not None and not isinstance(given, list):
        raise ConfigError(f"streams: expected a list of stream mappings, found {type(given).__name__}")
    streams = None
    if given is not None:
        streams = []
        for number, stream in enumerate(given):
            check_keys(f"streams[{number}]", as_mapping(f"streams[{number}]", stream), STREAM_KEYS)
            streams.append(Stream(**stream))
    defaults = {key: arguments.get(key) for key in ("remote", "local", "split", *DOWNLOAD_KEYS)}
    config = {"storage_options": arguments["storage_options"]} if arguments.get("storage_options") else None
    if streams is None and defaults["remote"] is None and defaults["local"] is None:
        raise ConfigError(
            "CONFIG: expected the dataset's remote, local or streams, found none; pass remote: s3://bucket/path "
            "(or a synthetic: shape)"
        )
    return build_streams(streams, defaults=defaults, stream_config=config)


def read_streams(arguments: Mapping[str, Any]) -> list[StreamIndex]:
    """Each stream's ``index.json``: the remote's when there is one (only that file is fetched), else the local."""
    from stream_plugin.storage import open_store

    _, rest = _split(arguments)
    defaults = DownloadSettings(**{key: rest[key] for key in DOWNLOAD_KEYS if rest.get(key) is not None})
    indexes = []
    for stream in _streams(rest):
        location = stream.remote_dir or stream.local_dir
        options = dict(stream.storage_options) if stream.remote_dir else {}
        try:
            text = open_store(location, **options).read_bytes(INDEX_BASENAME)
        except (StreamPluginError, OSError) as error:
            raise ConfigError(
                f"{location}: expected a stream holding {INDEX_BASENAME}, found it unreadable ({error}); check "
                "the path, the credentials and the endpoint"
            ) from error
        entries = parse_index(text, source=f"{location.rstrip('/')}/{INDEX_BASENAME}")
        keep_zip = stream.download_settings(defaults).keep_zip
        indexes.append(StreamIndex(location, options, bool(keep_zip), entries, len(text)))
    return indexes


def _requests(entry: ShardEntry, location: str) -> int:
    """The requests one download of the shard makes: a GET per file of an MDS shard; a Parquet shard's
    as ``parquet.request_count`` counts them (its identity check, footer and coalesced reads)."""
    if entry.format == "parquet":
        from stream_plugin.parquet.entries import parquet_shard
        from stream_plugin.parquet.request_count import index_requests

        return index_requests(parquet_shard(entry), location)
    return len(entry.file_pairs())


def workload_of_streams(
    indexes: Sequence[StreamIndex], config: DatasetConfig, weights: Sequence[Any]
) -> Workload:
    """A ``Workload`` of the shards the indexes list (in stream order, as the dataset numbers them)."""
    entries = [(entry, index.keep_zip) for index in indexes for entry in index.entries]
    return Workload(
        samples_per_shard=np.array([entry.samples for entry, _ in entries], np.int64),
        stored_bytes=np.array(
            [sum((zipped or raw).bytes for raw, zipped in entry.file_pairs()) for entry, _ in entries],
            np.int64,
        ),
        raw_bytes=np.array(
            [sum(raw.bytes for raw, _ in entry.file_pairs()) for entry, _ in entries], np.int64
        ),
        footprint=np.array([footprint(entry, keep_zip=keep) for entry, keep in entries], np.int64),
        requests_per_shard=np.array(
            [_requests(entry, index.location) for index in indexes for entry in index.entries], np.int64
        ),
        shards_per_stream=tuple(len(index.entries) for index in indexes),
        config=config,
        index_bytes=tuple(index.index_bytes for index in indexes) if all(i.index_bytes for i in indexes) else (),
        weights=tuple(weights) if any(weight.is_set for weight in weights) else (),
    )


def load_workload(
    source: str | Path | Mapping[str, Any] | RunConfig,
    overrides: Mapping[str, Any] | None = None,
    *,
    world_size: int = 1,
    data_parallel_size: int | None = None,
) -> Workload:
    """The ``Workload`` of CONFIG, with ``overrides`` of the dataset's options (``cache_limit``, ...).

    ``world_size`` (nodes x devices) turns a global batch size into the per-device one.
    """
    run = source if isinstance(source, RunConfig) else read_config(source)
    config = dataset_config(run, overrides or {}, world_size=world_size, data_parallel_size=data_parallel_size)
    if run.synthetic is not None:
        shape = {
            key: (
                parse_bytes(value, name=key)
                if key.endswith("bytes_per_shard")
                else parse_count(value, name=key)
            )
            for key, value in run.synthetic.items()
        }
        shape.setdefault("index_bytes_per_shard", INDEX_BYTES_PER_SHARD)  # an MDS index.json, estimated
        return Workload.synthetic(**shape, config=config, keep_zip=bool(run.dataset.get("keep_zip", False)))
    _, rest = _split(run.dataset)
    weights = [stream.weight for stream in _streams(rest)]
    return workload_of_streams(read_streams(run.dataset), config, weights)


# ---------------------------------------------------------------------------------------- the hardware
_DURATION = re.compile(r"\s*(\d+)\s*(ba|ep|sp)\s*")


def steps_per_epoch(workload: Workload, hardware: Hardware) -> int:
    """Global batches in one epoch of ``workload`` on ``hardware`` (the last one may be partial)."""
    return epoch_steps(workload, hardware).steps


def apply_duration(hardware: Hardware, workload: Workload, duration: str) -> Hardware:
    """``hardware`` running for ``duration``: ``1000ba`` (steps), ``2ep`` (epochs) or ``64000sp`` (samples)."""
    match = _DURATION.fullmatch(duration)
    if match is None:
        raise ConfigError(
            f"max_duration: expected steps, epochs or samples such as 1000ba, 2ep or 64000sp, found {duration!r}; "
            "write the count and its unit"
        )
    amount, unit = int(match.group(1)), match.group(2)
    if unit == "ep":
        return replace(hardware, epochs=amount, max_steps=None)
    per_epoch = steps_per_epoch(workload, hardware)
    if unit == "sp":
        batch = int(workload.config.batch_size or 1) * hardware.data_parallel(workload.config.replication).size
        amount = -(-amount // batch)
    return replace(hardware, epochs=max(1, -(-amount // per_epoch)), max_steps=amount)


def build_hardware(run: RunConfig | None, options: Mapping[str, Any]) -> Hardware:
    """``Hardware`` from its defaults, then what CONFIG says (nodes, workers, ...), then ``options``."""
    names = {item.name for item in fields(Hardware)}
    values = {
        **(run.hardware if run else {}),
        **{key: value for key, value in options.items() if key in names},
    }
    return Hardware(**values)


def build_run(
    source: str | Path | Mapping[str, Any] | RunConfig, options: Mapping[str, Any]
) -> tuple[Workload, Hardware]:
    """CONFIG and the command line's options (``read_options``) as the simulator's two inputs.

    The command line wins over CONFIG; ``max_duration`` over ``epochs``, and either over CONFIG's duration.
    """
    run = source if isinstance(source, RunConfig) else read_config(source)
    hardware = build_hardware(run, options)
    overrides = {
        option.name: options[option.name]
        for option in OPTIONS
        if option.group == "dataset" and option.name in options
    }
    # A mesh or data_parallel_size says how many ranks read different samples; else replication does.
    explicit = hardware.mesh is not None or hardware.data_parallel_size is not None
    data_parallel_size = hardware.data_parallel(None).size if explicit else None
    workload = load_workload(run, overrides, world_size=hardware.world_size, data_parallel_size=data_parallel_size)
    duration = options.get("max_duration") or (None if "epochs" in options else run.max_duration)
    if duration is not None:
        hardware = apply_duration(hardware, workload, duration)
    return workload, hardware


__all__ = [
    "DATASET_KEYS",
    "OPTIONS",
    "Option",
    "RunConfig",
    "StreamIndex",
    "apply_duration",
    "build_hardware",
    "build_run",
    "dataset_config",
    "load_workload",
    "read_config",
    "read_options",
    "read_streams",
    "steps_per_epoch",
    "workload_of_streams",
]
