"""Text loaders resume exactly and elastically: the text dataset keeps StreamingDataset's order and state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from support.resume import assert_continues, assert_resumes_identically, assert_same_output, take_ids
from support.text_data import write_tokens

from stream_plugin import StreamingDataLoader, World
from stream_plugin.text import StreamingTextDataset, TextCollator


class CollateWithIds(TextCollator):
    """TextCollator plus ``id``: the fixture rows start with their sample id."""

    def __call__(self, examples: Sequence[Any]) -> dict[str, Any]:
        batch = super().__call__(examples)
        batch["id"] = batch["input_ids"][:, 0].clone()
        return batch


def loader_factory(
    data: Path, *, batch: int, workers: int = 0, world: World | None = None
) -> Callable[[], StreamingDataLoader]:
    def make() -> StreamingDataLoader:
        dataset = StreamingTextDataset(
            max_seq_len=6,
            local=str(data),
            shuffle=True,
            num_canonical_nodes=2,
            world=world or World(rank=0, world_size=1),
        )
        return StreamingDataLoader(
            dataset, batch_size=batch, num_workers=workers, collate_fn=CollateWithIds(eos_token_id=3)
        )

    return make


def test_text_loader_resumes_exactly_with_other_worker_counts(tmp_path: Path) -> None:
    data = write_tokens(tmp_path / "data", range(120), length=8)
    assert_resumes_identically(
        [loader_factory(data, batch=8, workers=0), loader_factory(data, batch=8, workers=2)],
        cuts=[0, 4, 14],
        epochs=2,
    )


def test_text_loader_resumes_two_ranks_on_one(tmp_path: Path) -> None:
    data = write_tokens(tmp_path / "data", range(120), length=8)
    reference = take_ids(loader_factory(data, batch=8)())  # 15 global batches of 8
    ranks = [
        loader_factory(data, batch=4, world=World(rank=rank, world_size=2, local_rank=rank, local_world_size=2))()
        for rank in range(2)
    ]
    heads = [take_ids(loader, 6) for loader in ranks]
    head = [a + b for a, b in zip(*heads)]  # the global batches: rank 0's ids, then rank 1's
    assert_same_output(head, reference[:6], what="two ranks before the checkpoint")
    resumed = loader_factory(data, batch=8)()
    resumed.load_state_dict(ranks[0].state_dict())
    rest = list(resumed)
    assert_continues(head, [batch["id"].tolist() for batch in rest], reference)
    assert all(torch.equal(batch["labels"], batch["input_ids"]) for batch in rest)  # no padding here
