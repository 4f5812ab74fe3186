"""The first-batch check: ranks that must read the same batches do, and the others do not.

A wrong layout (a ``replication`` that groups the wrong ranks, a mesh the dataset was not given, a seed
that differs per rank) trains on garbage without a sound. At the first batch the ranks compare a digest
of their first batch's sample ids, in one collective, against the layout the training framework uses
(``expected``: the data-parallel coordinate of every global rank; by default the dataset's own):

- ranks with one expected coordinate (tensor, context, pipeline parallel replicas) must have equal
  digests;
- ranks with different expected coordinates must not read the same coordinate of the dataset.

Otherwise every rank raises the same ``LayoutError``, which names the ranks and the fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import numpy as np

from stream_plugin.collectives import gather_per_rank
from stream_plugin.errors import LayoutError
from stream_plugin.order.data_parallel import DataParallelLayout


def batch_digest(pieces: Iterator[np.ndarray], batch_size: int) -> int:
    """A 56-bit digest of the first ``batch_size`` sample ids of ``pieces`` (a rank's pass, in order)."""
    taken: list[np.ndarray] = []
    count = 0
    for piece in pieces:
        taken.append(piece[: batch_size - count])
        count += len(taken[-1])
        if count >= batch_size:
            break
    ids = np.concatenate(taken) if taken else np.zeros(0, np.int64)  # (<= batch_size,)
    return int.from_bytes(hashlib.blake2b(ids.astype("<i8").tobytes(), digest_size=7).digest(), "little")


def check_layout(
    digest: int, layout: DataParallelLayout, rank: int, expected: Sequence[int] | None = None
) -> None:
    """Compare this rank's first-batch ``digest`` with every rank's (one collective); a ``LayoutError``
    on every rank where the batches do not follow ``expected`` (see the module docstring)."""
    world_size = layout.world_size
    truth = list(layout.coordinates if expected is None else expected)
    if len(truth) != world_size:
        raise LayoutError(
            f"check_layout: expected a data-parallel coordinate for each of the {world_size} ranks, found "
            f"{len(truth)}; pass the coordinate of every global rank (e.g. stream_plugin.mesh_coordinates(mesh['dp']))"
        )
    gathered = gather_per_rank([digest, layout.coordinate(rank)], rank, world_size)
    digests = [value[0] for value in gathered]
    ours = [value[1] for value in gathered]
    problem = _replicas_that_differ(truth, digests, ours) or _coordinates_shared(truth, ours, layout)
    if problem:
        raise LayoutError(problem)


def _replicas_that_differ(truth: Sequence[int], digests: Sequence[int], ours: Sequence[int]) -> str | None:
    first_of: dict[int, int] = {}  # the expected coordinate -> the first rank that has it
    for other, coordinate in enumerate(truth):
        first = first_of.setdefault(coordinate, other)
        if digests[first] == digests[other]:
            continue
        ranks = [r for r, value in enumerate(truth) if value == coordinate]
        if ours[first] != ours[other]:
            cause = (
                f"the dataset splits them (it gives rank {first} data-parallel coordinate {ours[first]} and rank "
                f"{other} coordinate {ours[other]}): pass data_parallel_mesh=mesh['dp'] (the dims that read "
                "different samples) or data_parallel_rank= / data_parallel_size=, and leave replication unset"
            )
        else:
            cause = (
                "the dataset gives them one coordinate, so its settings differ between them (a seed, batch "
                "size, stream or epoch set per rank): build the dataset with the same arguments on every rank"
            )
        return (
            f"data-parallel layout: expected ranks {ranks} (one data-parallel coordinate, {coordinate}: tensor, "
            f"context or pipeline parallel replicas) to get the same batches, found that rank {first} and rank "
            f"{other} got different first batches; {cause}"
        )
    return None


def _coordinates_shared(truth: Sequence[int], ours: Sequence[int], layout: DataParallelLayout) -> str | None:
    first_of: dict[int, int] = {}  # the dataset's coordinate -> the first rank that reads it
    for other, coordinate in enumerate(ours):
        first = first_of.setdefault(coordinate, other)
        if truth[first] != truth[other]:
            return (
                f"data-parallel layout: expected ranks {first} and {other} (data-parallel coordinates "
                f"{truth[first]} and {truth[other]} of the training job) to get different samples, found the "
                f"dataset gives both coordinate {coordinate} ({layout.replication} replicas per coordinate, "
                "from replication or the mesh it was given); pass the job's data-parallel mesh as "
                "data_parallel_mesh, or leave replication unset"
            )
    return None


__all__ = ["batch_digest", "check_layout"]
