"""Stream mixing: how many samples each stream contributes to every epoch.

Three schemes, as in MosaicML Streaming 0.13:

- ``natural``: no stream sets a weight; each stream contributes its size once. With ``epoch_size``
  the epoch is split in proportion to the stream sizes instead.
- ``relative``: every stream sets ``proportion``; the epoch (``epoch_size``, or by default the total
  number of samples) is split in those proportions (normalised, so 2 : 6 equals 0.25 : 0.75).
- ``absolute``: streams set ``repeat`` (a multiple of the stream size) or ``choose`` (a sample
  count); a stream with neither in this scheme means ``repeat=1``. The epoch size is the sum, so
  passing ``epoch_size`` too is an error, as in MosaicML.

The counts are the same in every epoch; which samples fill them is ``sampling``'s job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from stream_plugin.errors import ConfigError, check_int
from stream_plugin.order.random import rng_for

WeightScheme = Literal["natural", "relative", "absolute"]

# Fractional parts closer than this count as tied, so that float noise in ``epoch_size * p``
# (about 1e-7 at 10**9 samples) cannot decide who gets a leftover sample; the seed does.
_TIE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class StreamWeight:
    """How much of one stream goes into each epoch: at most one of the three fields is set."""

    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [name for name in ("proportion", "repeat", "choose") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ConfigError(
                f"stream weight: expected at most one of proportion, repeat, choose, found {', '.join(given)}; keep only one"
            )
        for name in ("proportion", "repeat"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ConfigError(
                    f"{name}: expected a number >= 0, found {type(value).__name__} {value!r}; pass a float"
                )
            if not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"{name}: expected a finite number >= 0, found {value!r}; pass a non-negative weight"
                )
        if self.choose is not None:  # None: the field is unset (see the scheme check above)
            check_int("choose", self.choose, minimum=0, fix="pass a non-negative sample count")

    @property
    def is_set(self) -> bool:
        """Whether any weight is given."""
        return self.proportion is not None or self.repeat is not None or self.choose is not None


def validate_weights(weights: Sequence[StreamWeight], *, epoch_size: int | None) -> WeightScheme:
    """Check that all streams use one scheme and that ``epoch_size`` fits it; return the scheme."""
    if len(weights) == 0:
        raise ConfigError("streams: expected at least one stream, found none; pass one or more streams")
    for stream_id, weight in enumerate(weights):
        if not isinstance(weight, StreamWeight):
            raise ConfigError(
                f"weights[{stream_id}]: expected a StreamWeight, found {type(weight).__name__}; wrap it in StreamWeight(...)"
            )
    check_int("epoch_size", epoch_size, minimum=1, allow_none=True, fix="pass a sample count or None")

    relative = [i for i, weight in enumerate(weights) if weight.proportion is not None]
    absolute = [
        i for i, weight in enumerate(weights) if weight.repeat is not None or weight.choose is not None
    ]
    unset = [i for i, weight in enumerate(weights) if not weight.is_set]
    if relative and (absolute or unset):
        others = sorted(absolute + unset)
        raise ConfigError(
            f"stream weights: expected one scheme for all streams, found proportion on streams {relative} "
            f"but repeat/choose/none on streams {others}; give every stream a proportion, "
            f"or replace proportion with repeat/choose"
        )
    if relative:
        if sum(float(weights[i].proportion or 0.0) for i in relative) <= 0:
            raise ConfigError(
                "proportion: expected at least one stream with proportion > 0, found all 0; raise a proportion"
            )
        return "relative"
    if absolute:
        if epoch_size is not None:
            # MosaicML 0.13 raises here too: the epoch size is the sum of the absolute counts.
            raise ConfigError(
                f"epoch_size: expected None with repeat/choose weights (streams {absolute}), found {epoch_size}; "
                f"drop epoch_size, or use proportion weights to fix the epoch size"
            )
        return "absolute"
    return "natural"


def _split_relative(epoch_size: int, shares: np.ndarray, seed: int) -> np.ndarray:
    """Split ``epoch_size`` in proportion to ``shares`` (float64, sum > 0), summing exactly."""
    exact = epoch_size * (shares / shares.sum())  # (num_streams,)
    counts = np.floor(exact).astype(np.int64)
    shortfall = epoch_size - int(counts.sum())
    # Each floor loses less than one sample, so at most one extra per stream is ever needed.
    assert 0 <= shortfall <= len(shares), (epoch_size, shares, counts)
    if shortfall == 0:
        return counts
    # Largest remainder first, ties broken by a seeded random priority that is the same every epoch.
    # MosaicML picks the streams at random regardless of remainder, which can hand a sample to a
    # stream whose share is already whole (even a proportion of 0); we never do.
    remainder = np.round((exact - counts) / _TIE_TOLERANCE)
    remainder[shares <= 0] = -1  # a zero share gets nothing, even through float noise
    priority = rng_for(seed, 0, "stream_shortfall").permutation(len(shares))
    order = np.lexsort((priority, -remainder))  # (num_streams,) best first
    counts[order[:shortfall]] += 1
    return counts


def samples_per_stream(
    stream_sizes: Sequence[int], weights: Sequence[StreamWeight], *, epoch_size: int | None, seed: int
) -> np.ndarray:
    """Return how many samples each stream contributes to every epoch, int64 (num_streams,).

    ``repeat`` counts are ``int(repeat * size)`` (truncated), exactly as MosaicML 0.13 computes
    them, so ``repeat=0.29`` of 100 samples gives 28 (float ``0.29 * 100 = 28.999...``).
    """
    scheme = validate_weights(weights, epoch_size=epoch_size)
    if len(stream_sizes) != len(weights):
        raise ConfigError(
            f"weights: expected one per stream ({len(stream_sizes)}), found {len(weights)}; pass a weight per stream"
        )
    sizes = np.asarray(stream_sizes, dtype=np.int64)  # (num_streams,)
    if (sizes < 0).any():
        raise ConfigError(
            f"stream_sizes: expected counts >= 0, found {sizes.tolist()}; check the stream indexes"
        )

    if scheme == "relative":
        shares = np.array([weight.proportion for weight in weights], dtype=np.float64)
        total = int(sizes.sum()) if epoch_size is None else int(epoch_size)
        counts = _split_relative(total, shares, seed)
    elif scheme == "natural" and epoch_size is not None:
        if sizes.sum() == 0:
            raise ConfigError(
                f"epoch_size: expected streams with samples to fill {epoch_size}, found all streams empty; add data"
            )
        counts = _split_relative(int(epoch_size), sizes.astype(np.float64), seed)
    elif scheme == "absolute":
        per_stream = []
        for weight, size in zip(weights, sizes.tolist(), strict=True):
            if weight.choose is not None:
                per_stream.append(int(weight.choose))
            elif weight.repeat is not None:
                per_stream.append(int(weight.repeat * size))
            else:
                per_stream.append(size)
        counts = np.array(per_stream, dtype=np.int64)
    else:
        counts = sizes.copy()

    empty_but_drawn = np.flatnonzero((sizes == 0) & (counts > 0)).tolist()
    if empty_but_drawn:
        raise ConfigError(
            f"stream weights: expected samples to draw from streams {empty_but_drawn}, found them empty; "
            f"remove those streams or give them weight 0"
        )
    return counts
