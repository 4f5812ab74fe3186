"""Within-span shuffle algorithms: a name -> pure function registry.

A *span* is the contiguous run of samples (in shuffled shard order) that one canonical node reads
for one group (all streams mixed, or one stream). A shuffle rearranges a span in place and never
moves a sample to another span, which is what keeps shard downloads local to a node.

Every algorithm is a pure function of ``(ids, shard_bounds, key)``: its randomness comes from
``rng_for(seed, epoch, <purpose>, *span)``, so every epoch reshuffles and nothing is saved.

Names say what the algorithm does; MosaicML's names are accepted as aliases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from stream_plugin.errors import ConfigError
from stream_plugin.order.random import rng_for

# Past this many segments, shuffling them one by one in a Python loop costs more than one
# vectorised sort of the whole span.
_LOOP_SEGMENTS_MAX = 4096


@dataclass(frozen=True)
class SpanKey:
    """Everything a shuffle may depend on besides the ids: the randomness key and the block size."""

    seed: int
    epoch: int
    span: tuple[int, ...]  # (group, canonical node): names this span in the randomness key
    block_size: int


SpanShuffle = Callable[[np.ndarray, np.ndarray, SpanKey], None]
"""``shuffle(ids, shard_bounds, key)``: rearrange ``ids`` (1-D) in place.

``shard_bounds`` (num_runs + 1,) are the offsets in ``ids`` where each shard's run of samples
starts, ending with ``len(ids)``.
"""

_REGISTRY: dict[str, SpanShuffle] = {}
_ALIASES: dict[str, str] = {}


def register_shuffle(name: str, *aliases: str) -> Callable[[SpanShuffle], SpanShuffle]:
    """Decorator: make ``fn`` available as ``shuffle_algo=name`` (and under each alias)."""

    def register(fn: SpanShuffle) -> SpanShuffle:
        _REGISTRY[name] = fn
        for alias in aliases:
            _ALIASES[alias] = name
        return fn

    return register


def canonical_shuffle_name(name: str) -> str:
    """Resolve an alias (``py1e`` -> ``block``); raise ConfigError for unknown names."""
    resolved = _ALIASES.get(name, name)
    if resolved not in _REGISTRY:
        raise ConfigError(
            f"shuffle_algo: expected one of {list(shuffle_choices())}, found {name!r}; pick a registered algorithm "
            "or register yours with stream_plugin.order.shuffle.register_shuffle"
        )
    return resolved


def get_shuffle(name: str) -> SpanShuffle:
    """The registered function for ``name`` or one of its aliases."""
    return _REGISTRY[canonical_shuffle_name(name)]


def shuffle_choices() -> tuple[str, ...]:
    """Every accepted ``shuffle_algo``: each registered name followed by its aliases, in registration order."""
    return tuple(
        choice
        for name in _REGISTRY
        for choice in (name, *(alias for alias, target in _ALIASES.items() if target == name))
    )


def unregister_shuffle(name: str) -> None:
    """Remove ``name`` and its aliases from the registry (a plugin's teardown, a test's cleanup)."""
    if name not in _REGISTRY:
        raise ConfigError(
            f"shuffle_algo: expected a registered name among {shuffle_names()} to unregister, found {name!r}"
        )
    del _REGISTRY[name]
    for alias in [alias for alias, target in _ALIASES.items() if target == name]:
        del _ALIASES[alias]


def shuffle_names() -> list[str]:
    """Registered algorithm names (aliases excluded)."""
    return sorted(_REGISTRY)


def default_block_size(num_canonical_nodes: int) -> int:
    """MosaicML's default ``shuffle_block_size``: ``max(4_000_000 // C, 1 << 18)`` samples."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def shuffle_segments(ids: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> None:
    """Permute each segment ``ids[bounds[i]:bounds[i + 1]]`` independently, in place."""
    permute_segments(ids, bounds, rng, vectorised=len(bounds) - 1 > _LOOP_SEGMENTS_MAX)


def permute_segments(
    ids: np.ndarray, bounds: np.ndarray, rng: np.random.Generator, *, vectorised: bool, first_segment: int = 0
) -> None:
    """``shuffle_segments``'s two ways, chosen by the caller: ``rng.shuffle`` of each segment, or (many
    small segments) one sort by (segment number, random key). Adding a uniform [0, 1) float to the
    segment number keeps segments apart and orders each one randomly; the numbers start at
    ``first_segment``, so a run of a span's segments sorts by the keys the whole span would use."""
    if not vectorised:
        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if stop - start > 1:
                rng.shuffle(ids[start:stop])
        return
    lengths = np.diff(bounds)  # (num_segments,)
    segment_ids = np.arange(first_segment, first_segment + len(lengths), dtype=np.float64)  # (num_segments,)
    segment_of = np.repeat(segment_ids, lengths)  # (n,)
    segment_of += rng.random(len(ids))
    ids[:] = ids[stable_argsort(segment_of)]


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``, faster where no two keys are equal.

    Keys that are all different have exactly one sorting permutation, so numpy's default sort (a SIMD
    quicksort, 1.4..2.2x faster on 10M keys: ``benchmarks/notes/order.2.million-shard-indexes.md``) finds
    the very permutation the stable sort would. Equal neighbours after sorting mean a tie, whose order only
    the stable sort keeps: then the stable sort decides.
    """
    order = np.argsort(keys)
    ranked = keys[order]
    if len(ranked) > 1 and bool(np.any(ranked[1:] == ranked[:-1])):
        return np.argsort(keys, kind="stable")
    return order


def skip_shuffles(rng: np.random.Generator, lengths: Iterable[int]) -> None:
    """Advance ``rng`` exactly as ``rng.shuffle`` of 1-D arrays of these lengths, one after another, would.

    ``Generator.shuffle`` makes one bounded draw per position (numpy's ``random_interval(i)`` for
    ``i = n-1 .. 1``) whatever the values, dtype or strides, so shuffling a length-n view of one int64
    (stride 0) makes the same draws while touching 8 bytes and allocating nothing. int64 is the item
    size numpy's swap loop is specialised for: a third faster than a uint8 scratch array.

    Counting the 32-bit words the draws consume from bulk ``random_raw`` output, then ``advance``,
    gives the same state, but each draw starts where the previous one's rejections ended: resolving
    that chain with numpy array passes cost more per draw than this loop when tried.
    """
    drawn = [length for length in lengths if length > 1]  # shuffles of 0 or 1 item draw nothing
    if not drawn:
        return
    sink = as_strided(np.zeros(1, dtype=np.int64), shape=(max(drawn),), strides=(0,))  # (max,): one cell
    for length in drawn:
        rng.shuffle(sink[:length])


@register_shuffle("none")
def no_shuffle(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    """Keep the span in shard order (samples ascending within each shard)."""


@register_shuffle("permute", "naive")
def permute_span(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    """A uniform permutation of the whole span: best mixing, a node touches all its shards at once."""
    rng_for(key.seed, key.epoch, "permute_span", *key.span).shuffle(ids)


@register_shuffle("block", "py1b", "py1br", "py1e")
def block_shuffle(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    """Permute inside consecutive blocks of ``block_size`` samples of the span.

    A block is a contiguous run of the shard-ordered span, so reading one block touches at most
    ``ceil(block_size / shard_size) + 1`` shards: a node streams through its shards a few at a time.
    """
    bounds = np.arange(0, len(ids), key.block_size, dtype=np.int64)  # (num_blocks,)
    bounds = np.append(bounds, len(ids))  # (num_blocks + 1,)
    shuffle_segments(ids, bounds, rng_for(key.seed, key.epoch, "block_shuffle", *key.span))


@register_shuffle("intra_shard", "py1s", "py2s")
def intra_shard_shuffle(ids: np.ndarray, shard_bounds: np.ndarray, key: SpanKey) -> None:
    """Permute the samples of each shard among themselves; shards are read one at a time.

    The shard order itself is shuffled before spans are cut, and each node's shards again every epoch
    (see ``layout``), so this gives "shuffle shards, then samples within each shard".
    """
    shuffle_segments(ids, shard_bounds, rng_for(key.seed, key.epoch, "intra_shard_shuffle", *key.span))


# The built-in shuffles: each moves samples by position alone, whatever the values it moves.
_POSITIONAL: dict[str, SpanShuffle] = {
    "none": no_shuffle,
    "permute": permute_span,
    "block": block_shuffle,
    "intra_shard": intra_shard_shuffle,
}


def is_positional(name: str) -> bool:
    """Whether shuffle ``name`` (or an alias) moves samples by position alone, so a span of other values
    (each sample's shard, say) shuffled alike moves the same way: the built-ins, not a user's function."""
    resolved = canonical_shuffle_name(name)
    return resolved in _POSITIONAL and _REGISTRY[resolved] is _POSITIONAL[resolved]
