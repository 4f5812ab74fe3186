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

import numpy as np

from stream_plugin.errors import ConfigError

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


def _check_int(name: str, value: object) -> int:
    # bool is an int subclass, but True as a seed is almost certainly a bug at the call site.
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}: expected an int, found {type(value).__name__} {value!r}; pass an int")
    return int(value)


def key_words(seed: int, epoch: int, purpose: str, *index: int) -> list[int]:
    """Return the 32-bit words that identify ``(seed, epoch, purpose, index)``; distinct keys give distinct words."""
    if not isinstance(purpose, str) or not purpose:
        raise ConfigError(
            f"purpose: expected a non-empty str such as 'shard_order', found {purpose!r}; name what the numbers are for"
        )
    words = [_KEY_FORMAT_VERSION]
    words += _int_words(_check_int("seed", seed))
    words += _int_words(_check_int("epoch", epoch))
    words += _text_words(purpose)
    for position, value in enumerate(index):
        words += _int_words(_check_int(f"index[{position}]", value))
    return words


def rng_for(seed: int, epoch: int, purpose: str, *index: int) -> np.random.Generator:
    """Return a fresh generator keyed by ``(seed, epoch, purpose, *index)``.

    ``purpose`` names the use (``"shard_order"``, ``"block_shuffle"``, ``"stream_sample"``, ...);
    ``index`` narrows it further (a stream, a block, a node). Use ``epoch=0`` for choices that must
    be the same in every epoch.
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
