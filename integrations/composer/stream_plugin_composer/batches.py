"""How many samples a collated batch holds, for dict, tuple, list and tensor batches.

Composer adds this number, summed over ranks, to ``timestamp.sample_in_epoch``, and that sum is the
position our dataset resumes from. A wrong count silently shifts every resume, so a batch whose fields
disagree on their length is an error here rather than a guess.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stream_plugin.errors import ConfigError


def _is_container(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple)) or _leading_dim(value) is not None


def _leading_dim(value: Any) -> int | None:
    """dim 0 of a tensor or ndarray with at least one dimension; None for anything else."""
    shape = getattr(value, "shape", None)
    if shape is None or isinstance(value, type):
        return None
    try:
        return int(shape[0]) if len(shape) >= 1 else None
    except TypeError:
        return None


def _field_lengths(batch: Any, path: str) -> Iterator[tuple[str, int]]:
    """(field path, batch length) for every field of ``batch`` that has a batch dimension."""
    size = _leading_dim(batch)
    if size is not None:
        yield path, size
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            yield from _field_lengths(value, f"{path}[{key!r}]")
    elif isinstance(batch, (list, tuple)):
        # default_collate turns a column of strs/ints-without-tensors into a list of B leaves, and a
        # tuple sample into a tuple of per-field batches: tell the two apart by what they hold.
        if batch and not any(_is_container(item) for item in batch):
            yield path, len(batch)
        else:
            for index, item in enumerate(batch):
                yield from _field_lengths(item, f"{path}[{index}]")


def num_samples_in_batch(batch: Any) -> int:
    """The number of samples in ``batch`` (dim 0 of its fields); every field must agree.

    Dicts and tuples are searched recursively; 0-d values (a scalar in a dict) carry no batch
    dimension and are skipped.
    """
    lengths = dict(_field_lengths(batch, "batch"))
    sizes = set(lengths.values())
    if len(sizes) == 1:
        return sizes.pop()
    if not sizes:
        raise ConfigError(
            f"get_num_samples_in_batch: expected a batch with at least one tensor, array or list field, "
            f"found {type(batch).__name__} with none; pass get_num_samples_in_batch= to the DataSpec "
            "builder for custom batch types"
        )
    raise ConfigError(
        f"get_num_samples_in_batch: expected every field of the batch to have the same length, found "
        f"{lengths}; make the collate function return equal-length fields, or pass "
        "get_num_samples_in_batch= to the DataSpec builder"
    )
