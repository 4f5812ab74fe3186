"""Token blocks through Lightning: a StreamingDataModule whose build_dataset returns the block dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.token_blocks import write_token_stream

from stream_plugin.errors import StateError
from stream_plugin.text import StreamingTokenBlockDataset

pl = pytest.importorskip("lightning.pytorch")

from stream_plugin_lightning import DatasetSpec, StreamingDataModule  # noqa: E402

BLOCK = 16


class TokenBlockDataModule(StreamingDataModule):
    def build_dataset(self, split: Any, spec: DatasetSpec, batch_size: int) -> StreamingTokenBlockDataset:
        del split
        return StreamingTokenBlockDataset(
            block_size=BLOCK, batch_size=batch_size, world=self.world(), **spec.dataset_kwargs()
        )


class NextToken(pl.LightningModule):
    """Embedding + linear next-token model over ``block[:, :-1] -> block[:, 1:]``; records its batches."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4096, 8)
        self.head = torch.nn.Linear(8, 4096)
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        del batch_idx
        self.seen.append(batch.clone())
        logits = self.head(self.embed(batch[:, :-1]))  # (B, BLOCK, V)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_token_blocks_train_through_a_lightning_datamodule(tmp_path: Path) -> None:
    tokens = write_token_stream(tmp_path / "data", 60)  # 721 tokens: 45 blocks
    module = TokenBlockDataModule(
        train=DatasetSpec(local=str(tmp_path / "data"), shuffle=True), global_batch_size=4, num_workers=2
    )
    model = NextToken()
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=module)

    expected = list(
        StreamingTokenBlockDataset(block_size=BLOCK, local=str(tmp_path / "data"), shuffle=True, batch_size=4)
    )
    trained = [block for batch in model.seen for block in batch]
    assert len(trained) == len(expected) == (len(tokens) - 1) // BLOCK
    assert all(torch.equal(a, b) for a, b in zip(trained, expected))
    state = module.state_dict()["train"]  # what Lightning checkpoints carry
    assert state["fingerprint"].endswith(f":block_size={BLOCK}")
    other = StreamingTokenBlockDataset(
        block_size=2 * BLOCK, local=str(tmp_path / "data"), shuffle=True, batch_size=4
    )
    with pytest.raises(
        StateError, match=f"block_size: expected {BLOCK} as in the checkpoint, found {2 * BLOCK}"
    ):
        other.load_state_dict(state)
