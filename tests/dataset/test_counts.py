"""The counts harness: every epoch yields exactly its chosen samples, and lengths agree with what is yielded.

The sweep runs the dataset's own slicing (``StreamingDataset.sample_id_pieces``) for every (rank, worker)
of every layout, rebuilds what each rank's DataLoader yields (workers in turn, ``batch_size`` at a time,
the last batch possibly short), and checks:

- every rank yields the same number of batches of the same sizes (DDP cannot hang), and as many as
  ``len(loader)``, and as many samples as ``len(dataset)``;
- the samples before the rank-balance repeats, global batch by global batch, are the epoch's order: each
  chosen sample as often as chosen (``random``), or the whole batches of the chosen samples (the other
  methods); ``drop_last`` removes exactly the partial last global batch;
- fewer than D repeats per epoch, none when the partial batch divides by D.

Resumption at every cut of a small case runs through ``StreamingDataLoader`` on several in-process
ranks (an explicit ``World`` each), then on another number of ranks.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from support.datasets import write_streams
from support.orders import sample_ids, whole_order
from support.resume import assert_continues

from stream_plugin import ConfigError, Stream, StreamingDataLoader, StreamingDataset, World
from stream_plugin.order.topology import Topology
from stream_plugin.reading.cursor import IterationPlan

SAMPLE_COUNTS = (1, 7, 117, 1000, 3000)
BATCH_SIZES = (1, 4, 16)
RANKS = (1, 2, 3, 4)
WORKERS = (0, 2)
METHODS = ("random", "stratified", "per_stream", "device_per_stream")


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[Path]]:
    """For each N, two streams of about 70% and 30% of N (one stream when N is 1)."""
    root = tmp_path_factory.mktemp("counts")
    found = {}
    for total in SAMPLE_COUNTS:
        sizes = [total] if total == 1 else [math.ceil(total * 0.7), total - math.ceil(total * 0.7)]
        found[total] = write_streams(root / str(total), sizes, size_limit=1 << 13, payload=8)
    return found


def build(
    folders: list[Path],
    cache: Path,
    *,
    method: str,
    batch_size: int,
    ranks: int,
    rank: int = 0,
    **kwargs: object,
) -> StreamingDataset:
    streams = [Stream(remote=folder.as_uri(), local=str(cache / folder.name)) for folder in folders]
    return StreamingDataset(
        streams=streams,
        batch_size=batch_size,
        batching_method=method,
        shuffle=True,
        shuffle_seed=5,
        num_canonical_nodes=1 if len(folders) == 1 else 2,  # N = 1: one stream, one sample
        world=World(rank=rank, world_size=ranks, local_rank=rank, local_world_size=ranks),
        **kwargs,  # type: ignore[arg-type]
    )


def rank_batches(ids: list[np.ndarray], batch_size: int) -> list[np.ndarray]:
    """What a DataLoader makes of its workers' sample streams: ``batch_size`` at a time, workers in turn."""
    per_worker = [[flat[i : i + batch_size] for i in range(0, len(flat), batch_size)] for flat in ids]
    out: list[np.ndarray] = []
    for step in itertools.count():
        worker, turn = step % len(per_worker), step // len(per_worker)
        if turn >= len(per_worker[worker]):
            assert all(turn >= len(batches) for batches in per_worker[worker:]), "a worker ran out early"
            return out
        out.append(per_worker[worker][turn])
    raise AssertionError("unreachable")


def check_epoch(dataset: StreamingDataset, *, ranks: int, workers: int, drop_last: bool) -> None:
    B = dataset.batch_size
    assert B is not None
    assert dataset.num_canonical_nodes is not None
    plan = IterationPlan(0, 0, dataset.global_batch_size, dataset.num_canonical_nodes)
    order = whole_order(dataset, plan)
    per_rank = []
    for rank in range(ranks):
        topologies = [Topology(1, ranks, workers, rank=rank, worker=w) for w in range(max(workers, 1))]
        per_rank.append(rank_batches([sample_ids(dataset, plan, t) for t in topologies], B))
    loader_len = math.floor(len(dataset) / B) if drop_last else math.ceil(len(dataset) / B)
    steps = {len(batches) for batches in per_rank}
    assert steps == {loader_len}, f"ranks yield {sorted(steps)} batches, len(loader) is {loader_len}"
    assert all(sum(len(b) for b in batches) == len(dataset) for batches in per_rank)
    # The last batch: the same size everywhere; the samples before the repeats rebuild the partial batch.
    real_rows, repeats = [], 0
    for step in range(loader_len):
        shares = [batches[step] for batches in per_rank]
        assert len({len(share) for share in shares}) == 1, f"step {step}: ranks differ in batch size"
        if step == loader_len - 1 and len(order.tail) and not drop_last:  # the partial global batch
            counts = _real_counts(len(order.tail), ranks)
            loader_pass = dataset.begin_pass()  # the first pass of a fresh dataset: ``plan``'s
            assert loader_pass.plan == plan and counts[0] == loader_pass.last_batch_real
            repeats += sum(len(share) - count for share, count in zip(shares, counts, strict=True))
            real_rows.append(
                np.concatenate([share[:count] for share, count in zip(shares, counts, strict=True)])
            )
        else:
            real_rows.append(np.concatenate(shares))
    yielded = np.concatenate(real_rows) if real_rows else np.zeros(0, dtype=np.int64)
    expected = order.real_flat()
    if drop_last:
        expected = expected[: order.full_batches * order.global_batch_size]
    np.testing.assert_array_equal(yielded, expected)
    tail = 0 if drop_last else len(order.tail)
    assert repeats == (-(-tail // ranks) * ranks - tail if tail else 0) and repeats < ranks
    chosen = Counter(
        np.concatenate(
            [
                stream_ids + offset
                for stream_ids, offset in zip(
                    dataset.plan.planner.chosen_samples(0),
                    dataset.plan.table.sample_offset_per_stream.tolist(),
                    strict=True,
                )
            ]
        ).tolist()
    )
    got = Counter(yielded.tolist())
    if dataset.batching_method == "random" and not drop_last:
        assert got == chosen, "random batching must yield each chosen sample exactly as often as chosen"
    assert not got - chosen, "a sample was yielded more often than chosen"


def _real_counts(tail: int, ranks: int) -> list[int]:
    base, extra = divmod(tail, ranks)
    return [base + (1 if rank < extra else 0) for rank in range(ranks)]


@pytest.mark.parametrize("total", SAMPLE_COUNTS)
@pytest.mark.parametrize("method", METHODS)
def test_every_layout_yields_the_chosen_samples_and_its_lengths(
    total: int, method: str, remotes: dict[int, list[Path]], tmp_path: Path
) -> None:
    checked = 0
    for batch_size, ranks, workers, drop_last in itertools.product(
        BATCH_SIZES, RANKS, WORKERS, (False, True)
    ):
        dataset = build(remotes[total], tmp_path, method=method, batch_size=batch_size, ranks=ranks)
        dataset.bind_loader(batch_size=batch_size, drop_last=drop_last)
        try:
            len(dataset)
        except ConfigError as error:
            assert method == "stratified" and "batching_method='stratified'" in str(error)
            continue
        check_epoch(dataset, ranks=ranks, workers=workers, drop_last=drop_last)
        checked += 1
    assert checked > 0


def test_one_device_yields_117_samples_at_batch_4(remotes: dict[int, list[Path]], tmp_path: Path) -> None:
    dataset = build(remotes[117], tmp_path, method="random", batch_size=4, ranks=1)
    batches = [batch["id"].tolist() for batch in StreamingDataLoader(dataset, batch_size=4)]
    flat = [i for batch in batches for i in batch]
    assert len(flat) == len(set(flat)) == len(dataset) == 117
    assert [len(b) for b in batches[-2:]] == [4, 1] and len(batches) == 30
    dropped = StreamingDataLoader(
        build(remotes[117], tmp_path, method="random", batch_size=4, ranks=1), batch_size=4, drop_last=True
    )
    assert len(dropped) == 29 and sum(len(batch["id"]) for batch in dropped) == 116


def test_four_ranks_at_batch_16_yield_3000_samples_without_duplicates(
    remotes: dict[int, list[Path]], tmp_path: Path
) -> None:
    seen: list[int] = []
    counts = []
    for rank in range(4):
        dataset = build(
            remotes[3000], tmp_path / str(rank), method="random", batch_size=16, ranks=4, rank=rank
        )
        loader = StreamingDataLoader(dataset, batch_size=16)
        batches = list(loader)
        counts.append(len(batches))
        seen += [i for batch in batches for i in batch["id"].tolist()]
    assert len(set(counts)) == 1
    assert sorted(seen) == list(range(3000))  # 3000 = 46 x 64 + 56: 14 per rank, no repeat


@pytest.mark.parametrize("first, then", [(2, 3), (3, 1), (1, 4)])
def test_resume_at_every_cut_on_another_rank_count_is_exact(
    first: int, then: int, remotes: dict[int, list[Path]], tmp_path: Path
) -> None:
    folders = remotes[117]
    G = 12  # divides by every rank count here: the same global batch on both sides

    def loaders(ranks: int) -> list[StreamingDataLoader]:
        return [
            StreamingDataLoader(
                build(
                    folders,
                    tmp_path / f"{ranks}-{rank}",
                    method="random",
                    batch_size=G // ranks,
                    ranks=ranks,
                    rank=rank,
                ),
                batch_size=G // ranks,
            )
            for rank in range(ranks)
        ]

    def global_rows(group: list[StreamingDataLoader], limit: int | None) -> list[list[int]]:
        iterators = [iter(loader) for loader in group]
        rows = []
        for step in itertools.count():
            if limit is not None and step == limit:
                break
            shares = [next(iterator, None) for iterator in iterators]
            if shares[0] is None:
                assert all(share is None for share in shares), "ranks ended at different steps"
                break
            row = []
            for loader, share in zip(group, shares, strict=True):
                assert share is not None
                row += share["id"].tolist()[: loader.real_samples(step)]
            rows.append(row)
        return rows

    reference = [i for row in global_rows(loaders(first), None) for i in row]
    assert sorted(reference) == list(range(117))
    for cut in range(math.ceil(117 / G) + 1):
        head_group = loaders(first)
        head = global_rows(head_group, cut)
        state = head_group[0].state_dict()
        assert all(loader.state_dict() == state for loader in head_group)
        tail_group = loaders(then)
        for loader in tail_group:
            loader.load_state_dict(state)
        rest = global_rows(tail_group, None)
        flat_head, flat_rest = [i for row in head for i in row], [i for row in rest for i in row]
        assert_continues(flat_head, flat_rest, reference, what=f"the run resumed after {cut} batches")
        # The epoch's length holds across the resume: batches before the cut and after it.
        assert len(head) + len(rest) == len(tail_group[0]) == len(head_group[0]), f"cut {cut}"


@pytest.mark.parametrize("epoch_size", [50, 200])
@pytest.mark.parametrize("method", METHODS)
def test_up_and_down_sampled_epochs_yield_their_chosen_samples(
    epoch_size: int, method: str, remotes: dict[int, list[Path]], tmp_path: Path
) -> None:
    for ranks, workers, drop_last in itertools.product((1, 3), (0, 2), (False, True)):
        dataset = build(
            remotes[117], tmp_path, method=method, batch_size=2, ranks=ranks, epoch_size=epoch_size
        )
        dataset.bind_loader(batch_size=2, drop_last=drop_last)
        check_epoch(dataset, ranks=ranks, workers=workers, drop_last=drop_last)
