"""Counter-based randomness: every random choice is a pure function of ``(seed, epoch, purpose, index)``.

Nothing random is ever saved or threaded through calls. A caller that needs random numbers asks
for a fresh generator keyed by what the numbers are for, so two uses never share (or alias) a
stream, and a resumed run recomputes exactly the same numbers.

The key is encoded injectively into 32-bit words before it reaches ``numpy.random.SeedSequence``:
each integer is written as ``(sign, word count, words...)`` and the purpose as its UTF-8 bytes
with a length prefix. Hence ``(seed, epoch)`` and ``(seed + 1, epoch - 1)`` are different keys
(MosaicML's ``seed + epoch`` makes them equal), negative and arbitrarily large seeds work, and
distinct purposes can never collide the way a hash could.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stream_plugin.errors import ConfigError, check_int

# Bump only together with the golden values in tests/order/test_random.py: changing the encoding
# changes every sample order produced by this package.
_KEY_FORMAT_VERSION = 1
_WORD_BITS = 32
_WORD_MASK = (1 << _WORD_BITS) - 1


def _int_words(value: int) -> list[int]:
    """Encode an int of any size and sign as ``[sign, count, low word, ..., high word]``."""
    magnitude = abs(value)
    words: list[int] = []
    while magnitude:
        words.append(magnitude & _WORD_MASK)
        magnitude >>= _WORD_BITS
    return [1 if value < 0 else 0, len(words), *words]


def _text_words(text: str) -> list[int]:
    """Encode text as ``[byte count, 4 bytes per word...]`` (little-endian, zero padded)."""
    data = text.encode("utf-8")
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype="<u4").tolist()
    return [len(data), *words]


def key_words(seed: int, epoch: int, purpose: str, *index: int) -> list[int]:
    """Return the 32-bit words that identify ``(seed, epoch, purpose, index)``; distinct keys give distinct words."""
    if not isinstance(purpose, str) or not purpose:
        raise ConfigError(
            f"purpose: expected a non-empty str such as 'shard_order', found {purpose!r}; name what the numbers are for"
        )
    words = [_KEY_FORMAT_VERSION]
    words += _int_words(check_int("seed", seed, fix="pass an int"))
    words += _int_words(check_int("epoch", epoch, fix="pass an int"))
    words += _text_words(purpose)
    for position, value in enumerate(index):
        words += _int_words(check_int(f"index[{position}]", value, fix="pass an int"))
    return words


def rng_for(seed: int, epoch: int, purpose: str, *index: int) -> np.random.Generator:
    """Return a fresh generator keyed by ``(seed, epoch, purpose, *index)``.

    ``purpose`` names the use (``"block_shuffle"``, ``"stream_sample"``, ...); ``index`` narrows it
    further (a stream, a block, a node). Use ``epoch=0`` for choices that must be the same in every
    epoch. The shard order uses two purposes, both indexed by the group:

    - ``"shard_placement"`` (always ``epoch=0``): the run's shard order, cut into the canonical nodes'
      spans, so each node reads the same shards every epoch;
    - ``"node_shard_order"``: each epoch's permutation of the shard runs inside each node's span.

    (Before shards stayed on their node, ``"shard_order"`` drew a fresh order of all shards each epoch.)
    """
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(key_words(seed, epoch, purpose, *index)))
    )


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """Apply the SplitMix64 finaliser elementwise; a bijection on uint64 with good avalanche."""
    mixed = values + np.uint64(0x9E3779B97F4A7C15)
    mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return mixed ^ (mixed >> np.uint64(31))


def random_bits(seed: int, epoch: int, purpose: str, counters: np.ndarray, *index: int) -> np.ndarray:
    """Return one random uint64 per counter, keyed by ``(seed, epoch, purpose, *index)``, same shape.

    Vectorised counter-based randomness: element ``i`` depends only on the key and ``counters[i]``,
    so any subset of the values can be recomputed without generating the others (for example the
    sort key of block ``b`` without touching blocks ``0..b-1``).
    """
    key = rng_for(seed, epoch, purpose, *index).integers(0, 2**64, dtype=np.uint64, endpoint=False)
    counters = np.asarray(counters)
    if counters.dtype.kind not in "iu":
        raise ConfigError(
            f"counters: expected an integer array, found dtype {counters.dtype}; pass sample or block ids"
        )
    # Two rounds: the first keys the counter, the second hides any linear structure left by the key.
    with np.errstate(over="ignore"):
        return _splitmix64(_splitmix64(counters.astype(np.uint64) ^ key) + key)


# A Feistel network over b-bit values is a bijection for any round function, so it gives a keyed
# permutation of [0, 2**b) that can be evaluated (and inverted) at any position without building
# the whole permutation. Cycle walking restricts it to [0, size). Four rounds of a multiply-xorshift
# round function are plenty for sample selection (this is not cryptography).
_FEISTEL_ROUNDS = 4


@dataclass(frozen=True)
class _Word:
    """Integer width the network runs in: 32 bits when the domain fits (twice as fast), else 64."""

    dtype: type[np.unsignedinteger]
    bits: int
    multiplier_a: int
    multiplier_b: int
    xorshift: int


_WORD_32 = _Word(np.uint32, 32, 0x9E3779B1, 0x85EBCA77, 15)
_WORD_64 = _Word(np.uint64, 64, 0xD6E8FEB86659FD93, 0xC2B2AE3D27D4EB4F, 29)


def _feistel_halves(size: int) -> tuple[int, int]:
    """Return (high bits, low bits) of the smallest even-round Feistel domain covering ``size``."""
    total_bits = max(2, (size - 1).bit_length())
    low_bits = total_bits // 2
    return total_bits - low_bits, low_bits


# Values are processed in chunks that fit in cache, with in-place ufuncs: this is several times
# faster than whole-array expressions on 10**8 values, which allocate and miss cache at every step.
_CHUNK = 1 << 15


def _feistel(
    values: np.ndarray, keys: list[int], halves: tuple[int, int], word: _Word, inverse: bool
) -> np.ndarray:
    """Apply the network (or its inverse) to ``values`` below ``2**(sum(halves))``; returns ``word.dtype``."""
    # Round r maps (H: hi bits, L: lo bits) to (L, H ^ F_r(L)), F_r a multiply-xorshift hash keyed by
    # keys[r]; the halves swap widths every round. The inverse undoes the rounds in reverse order.
    high_bits, low_bits = halves
    widths = [(high_bits, low_bits) if r % 2 == 0 else (low_bits, high_bits) for r in range(len(keys))]
    rounds = list(range(len(keys) - 1, -1, -1) if inverse else range(len(keys)))
    dtype = word.dtype
    round_keys = [dtype(key & ((1 << word.bits) - 1)) for key in keys]
    multiplier_a, multiplier_b, xorshift = (
        dtype(word.multiplier_a),
        dtype(word.multiplier_b),
        dtype(word.xorshift),
    )
    result = np.empty(values.shape, dtype)
    kept_buf, mixed_buf, hash_buf = (np.empty(min(_CHUNK, values.size), dtype) for _ in range(3))
    for begin in range(0, values.size, _CHUNK):
        state = values[begin : begin + _CHUNK].astype(dtype)  # a copy, converted chunk by chunk
        kept, mixed, hashed = kept_buf[: state.size], mixed_buf[: state.size], hash_buf[: state.size]
        for r in rounds:
            hi, lo = widths[r]
            if inverse:
                np.right_shift(state, dtype(hi), out=kept)  # old low half, now on top
                np.bitwise_and(state, dtype((1 << hi) - 1), out=mixed)
            else:
                np.bitwise_and(state, dtype((1 << lo) - 1), out=kept)
                np.right_shift(state, dtype(lo), out=mixed)
            # hashed = top `hi` bits of multiply-xorshift(kept ^ key); `state` is scratch here.
            np.bitwise_xor(kept, round_keys[r], out=hashed)
            np.multiply(hashed, multiplier_a, out=hashed)
            np.right_shift(hashed, xorshift, out=state)
            np.bitwise_xor(hashed, state, out=hashed)
            np.multiply(hashed, multiplier_b, out=hashed)
            np.right_shift(hashed, dtype(word.bits - hi), out=hashed)
            np.bitwise_xor(mixed, hashed, out=mixed)
            if inverse:
                np.left_shift(mixed, dtype(lo), out=state)
                np.bitwise_or(state, kept, out=state)
            else:
                np.left_shift(kept, dtype(hi), out=state)
                np.bitwise_or(state, mixed, out=state)
        result[begin : begin + _CHUNK] = state
    return result


def _walk(values: np.ndarray, size: int, keys: list[int], inverse: bool) -> np.ndarray:
    """Apply the Feistel network until every value lands in [0, size) (cycle walking); int64."""
    halves = _feistel_halves(size)
    word = _WORD_32 if sum(halves) <= 32 else _WORD_64
    result = _feistel(values.ravel(), keys, halves, word, inverse)
    limit = word.dtype(size - 1)
    outside = np.flatnonzero(result > limit)
    # Each walk leaves fewer than half of the remaining values outside, since 2**bits < 2 * size.
    while outside.size:
        result[outside] = _feistel(result[outside], keys, halves, word, inverse)
        outside = outside[result[outside] > limit]
    return result.astype(np.int64).reshape(values.shape)


def _permutation_keys(seed: int, epoch: int, purpose: str, index: tuple[int, ...]) -> list[int]:
    generator = rng_for(seed, epoch, purpose, *index)
    return generator.integers(0, 2**64, _FEISTEL_ROUNDS, dtype=np.uint64).tolist()


def _check_positions(name: str, values: np.ndarray, size: int) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise ConfigError(f"{name}: expected an integer array, found dtype {values.dtype}; pass int64 ids")
    if size < 1 or size > 2**62:
        raise ConfigError(f"size: expected 1 <= size <= 2**62, found {size}; permute a non-empty range")
    if values.size and (values.min() < 0 or values.max() >= size):
        raise ConfigError(
            f"{name}: expected values in [0, {size}), found [{values.min()}, {values.max()}]; pass positions below size"
        )
    return values


def permute(positions: np.ndarray, size: int, seed: int, epoch: int, purpose: str, *index: int) -> np.ndarray:
    """Return ``perm[positions]`` for a keyed random permutation ``perm`` of ``range(size)``, as int64.

    The permutation is never materialised: each position is mapped on its own, in O(1) expected
    work, so a window of a 10**9-element permutation costs only the window.
    """
    positions = _check_positions("positions", positions, size)
    return _walk(positions, size, _permutation_keys(seed, epoch, purpose, index), inverse=False)


def unpermute(ids: np.ndarray, size: int, seed: int, epoch: int, purpose: str, *index: int) -> np.ndarray:
    """Return the positions of ``ids`` in the permutation of :func:`permute` (its inverse), as int64."""
    ids = _check_positions("ids", ids, size)
    return _walk(ids, size, _permutation_keys(seed, epoch, purpose, index), inverse=True)
