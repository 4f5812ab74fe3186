"""The dataset's options as one frozen, validated value: the one place their names, defaults and choices live.

``DatasetConfig`` holds every argument of ``StreamingDataset`` that is not a stream, the world or the
transform. The download options (``download_retry``, ``download_timeout``, ``validate_hash``,
``keep_zip``) are not here: they are defaults of each ``Stream`` (``stream.DownloadSettings``), and a
stream's own values win over them.

The choices of ``shuffle_algo``, ``batching_method`` and ``sampling_method`` come from the ``order``
package's registries: a shuffle registered with ``order.shuffle.register_shuffle`` is a valid
``shuffle_algo`` at once. ``order_settings`` and ``fingerprint`` derive what shapes the sample order
from the config, so that list is written once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from stream_plugin.cache.first_shards import check_first_shards
from stream_plugin.cache.future import EvictionPolicy, check_eviction
from stream_plugin.cache.start_stagger import check_start_stagger
from stream_plugin.errors import ConfigError, ConfigTypeError, check_int
from stream_plugin.format.read_options import ReadOptions, normalize_decode, normalize_zero_copy
from stream_plugin.order.batching import BATCHING_METHODS, BatchingMethod
from stream_plugin.order.data_parallel import DataParallelLayout
from stream_plugin.order.plan import OrderConfig
from stream_plugin.order.sampling import SAMPLING_METHODS, SamplingMethod
from stream_plugin.order.shuffle import shuffle_choices
from stream_plugin.reading.epochs import OrderSettings
from stream_plugin.reading.state import fingerprint as digest
from stream_plugin.units import parse_bytes, parse_count

# For typed configuration (LightningCLI's parser): the accepted shuffle names as a Literal, read from the
# registry when this module is first imported (a shuffle registered before then is included). Type
# checkers see a str: the registry grows at run time.
if TYPE_CHECKING:
    ShuffleAlgo = str
else:
    ShuffleAlgo = Literal[shuffle_choices()]

_POSITIVE_OR_NONE = ("predownload", "num_canonical_nodes", "batch_size", "shuffle_block_size", "replication")
_FLAGS = ("shuffle", "allow_unsafe_types", "drop_last")


PARTITION_ALGOS = ("orig", "relaxed")  # MosaicML's; both give our one partitioning


def check_partition_algo(partition_algo: str) -> str:
    """MosaicML's ``partition_algo`` values are accepted; ours has one partitioning, so warn they are ignored."""
    if partition_algo not in PARTITION_ALGOS:
        raise ConfigError(
            f"partition_algo: expected one of {list(PARTITION_ALGOS)}, found {partition_algo!r}; leave it "
            "unset (the order contract in docs/order.md describes the one partitioning used)"
        )
    if partition_algo != "relaxed":
        warnings.warn(
            f"partition_algo={partition_algo!r} is accepted for compatibility and ignored: samples are "
            "partitioned as the order contract (docs/order.md) says, whatever the value",
            UserWarning,
            stacklevel=3,
        )
    return partition_algo


@dataclass(frozen=True)
class DatasetConfig:
    """``StreamingDataset``'s options, checked at construction (MosaicML Streaming 0.13's names and defaults).

    ``epoch_size`` and ``cache_limit`` hold counts here; ``from_arguments`` also takes the
    human-friendly strings (``"100k"``, ``"64gb"``) the dataset accepts. The field defaults are the one
    place the dataset's defaults are written (``DEFAULTS``; the dataset's signature reads them).

    ``drop_last`` is the loader's, not an argument of the dataset: ``with_loader`` (through
    ``StreamingDataset.bind_loader``) sets it, with the loader's ``batch_size`` when the dataset has none.
    """

    epoch_size: int | None = None
    predownload: int | None = None
    cache_limit: int | None = None
    eviction: EvictionPolicy = "belady"
    sampling_method: SamplingMethod = "balanced"
    sampling_granularity: int = 1
    partition_algo: str = "relaxed"
    num_canonical_nodes: int | None = None
    batch_size: int | None = None
    shuffle: bool = False
    shuffle_algo: str = "py1e"
    shuffle_seed: int = OrderConfig.shuffle_seed  # MosaicML's seed, written once, in the order maths
    shuffle_block_size: int | None = None
    batching_method: BatchingMethod = "random"
    allow_unsafe_types: bool = False
    decode: str | Mapping[str, str] = "pil"  # image columns: format.image_decode.IMAGE_DECODES
    zero_copy: bool | Sequence[str] = False  # every bytes column, or these (format.read_options)
    replication: int | None = None
    start_stagger: float = 0.0  # seconds over which the nodes' first shard downloads spread (cache.start_stagger)
    first_shards: int | None = None  # at most this many of a node's first-shard downloads at once (cache.first_shards)
    drop_last: bool = False

    def __post_init__(self) -> None:
        for name in _POSITIVE_OR_NONE:
            check_int(name, getattr(self, name), minimum=1, allow_none=True)
        check_int("sampling_granularity", self.sampling_granularity, minimum=1, fix="pass 1 or more samples")
        check_int(
            "epoch_size", self.epoch_size, minimum=0, allow_none=True, fix="pass a sample count or None"
        )
        check_int(
            "cache_limit", self.cache_limit, minimum=0, allow_none=True, fix="pass a byte count or None"
        )
        check_int("shuffle_seed", self.shuffle_seed, fix="pass an int seed")
        for name in _FLAGS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigTypeError(
                    f"{name}: expected True or False, found {type(value).__name__} {value!r}"
                )
        check_eviction(self.eviction)
        object.__setattr__(self, "start_stagger", check_start_stagger(self.start_stagger))
        check_first_shards(self.first_shards)
        if isinstance(self.decode, Mapping):  # a copy: the caller's dict may change later
            object.__setattr__(self, "decode", dict(self.decode))
        object.__setattr__(self, "zero_copy", normalize_zero_copy(self.zero_copy))  # a list as a sorted tuple
        self.read_options  # noqa: B018 - checks decode and zero_copy
        _check_choice("shuffle_algo", self.shuffle_algo, shuffle_choices())
        _check_choice("batching_method", self.batching_method, BATCHING_METHODS)
        _check_choice("sampling_method", self.sampling_method, SAMPLING_METHODS)
        _check_choice("partition_algo", self.partition_algo, PARTITION_ALGOS)

    @classmethod
    def from_arguments(cls, **arguments: Any) -> DatasetConfig:
        """The config of ``StreamingDataset``'s keyword arguments (one not given takes its default), as the
        dataset has always read them: sizes as strings, truthy flags, a seed anything ``int()`` takes;
        warns about ``partition_algo`` and, as MosaicML does, about a ``predownload`` below ``batch_size``."""
        config = cls(**{name: _READ_ARGUMENT.get(name, _as_given)(value) for name, value in arguments.items()})
        predownload, batch_size = config.predownload, config.batch_size
        if predownload is not None and batch_size is not None and predownload < batch_size:
            warnings.warn(
                f"predownload: expected at least batch_size={batch_size} samples, found {predownload}: "
                f"predownload < batch_size ({predownload} < {batch_size}). This may result in slower batch "
                "time. Recommendation is to set predownload to at-least batch_size",
                UserWarning,
                stacklevel=4,
            )
        return config

    def with_loader(self, *, batch_size: int | None, drop_last: bool) -> DatasetConfig:
        """This config with a DataLoader's settings: its ``drop_last``, and its ``batch_size`` where this
        config has none (when both are set they must agree: workers build whole batches)."""
        if self.batch_size is not None and batch_size is not None and batch_size != self.batch_size:
            raise ConfigError(
                f"StreamingDataLoader: expected batch_size={self.batch_size} as the dataset's per-device "
                f"batch_size, found {batch_size}; pass the same value to both (or leave the dataset's unset)"
            )
        return replace(
            self, batch_size=self.batch_size if batch_size is None else batch_size, drop_last=drop_last
        )

    def data_parallel_size(self, world_size: int) -> int:
        """Ranks that read different samples under ``replication`` alone: ``world_size`` over it, which
        must divide it (a dataset's ``data_parallel`` also knows a mesh's)."""
        return DataParallelLayout.consecutive(world_size, self.replication or 1).size

    @property
    def read_options(self) -> ReadOptions:
        """What the shard readers hand out: images as PIL or tensors, ``bytes`` copied or as views."""
        return ReadOptions(decode=normalize_decode(self.decode), zero_copy=normalize_zero_copy(self.zero_copy))

    @property
    def order_settings(self) -> OrderSettings:
        """Every setting that shapes the global order, except the global batch size and canonical nodes."""
        return OrderSettings(
            shuffle=self.shuffle,
            shuffle_algo=self.shuffle_algo if self.shuffle else "none",
            shuffle_seed=self.shuffle_seed,
            shuffle_block_size=self.shuffle_block_size,
            batching_method=self.batching_method,
            sampling_method=self.sampling_method,
            sampling_granularity=self.sampling_granularity,
        )

    def fingerprint(self, index_digests: list[str], weights: list[str]) -> str:
        """The resume-state fingerprint: the data (index digests, stream weights) and what shapes the order.

        Its value for given data and settings never changes between versions: states written by
        earlier versions must keep loading.
        """
        return digest(
            {
                "indexes": index_digests,
                "weights": weights,
                "epoch_size": self.epoch_size,
                **asdict(self.order_settings),
            }
        )


def _as_given(value: Any) -> Any:
    return value


# How ``from_arguments`` reads the arguments the dataset takes in more than one form.
_READ_ARGUMENT: dict[str, Callable[[Any], Any]] = {
    "epoch_size": lambda value: None if value is None else parse_count(value, name="epoch_size"),
    "cache_limit": lambda value: None if value is None else parse_bytes(value, name="cache_limit"),
    "shuffle": bool,
    "allow_unsafe_types": bool,
    "shuffle_seed": int,
    "partition_algo": check_partition_algo,
}


# MosaicML's words for a bad choice, kept in ours so that code matching its messages still matches.
_MOSAIC_CHOICE_PHRASES = {"sampling_method": "Invalid sampling method: {value}"}


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        phrase = _MOSAIC_CHOICE_PHRASES.get(name)
        raise ConfigError(
            f"{name}: expected one of {list(choices)}, found {value!r}"
            + (f" ({phrase.format(value=value)})" if phrase else "")
            + "; pick one of them"
            + (
                " or register yours with stream_plugin.order.shuffle.register_shuffle"
                if name == "shuffle_algo"
                else ""
            )
        )


# The defaults of every option, for signatures that restate the arguments (``StreamingDataset``'s, the
# Lightning ``DatasetSpec``): read from the fields of DatasetConfig, so each default is written once.
DEFAULTS: Final = DatasetConfig()


__all__ = [
    "DEFAULTS",
    "PARTITION_ALGOS",
    "BatchingMethod",
    "DatasetConfig",
    "SamplingMethod",
    "ShuffleAlgo",
    "check_partition_algo",
]
