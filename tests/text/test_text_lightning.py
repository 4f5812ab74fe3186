"""StreamingTextDataModule: a real Lightning Trainer trains on text batches, without llm-foundry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.text_data import write_text

from stream_plugin.text import IGNORE_INDEX, StreamingTextDataset, TextCollator

pl = pytest.importorskip("lightning.pytorch")

from stream_plugin_lightning import DatasetSpec, StreamingTextDataModule  # noqa: E402


class TinyLanguageModel(pl.LightningModule):
    """Embedding + linear next-token model; records every batch it trains on."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, 16)
        self.head = torch.nn.Linear(16, vocab_size)
        self.seen: list[dict[str, Any]] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        del batch_idx
        self.seen.append({key: value.clone() for key, value in batch.items() if torch.is_tensor(value)})
        logits = self.head(self.embed(batch["input_ids"]))[:, :-1]  # (B, L-1, V)
        targets = batch["labels"][:, 1:]  # (B, L-1)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_text_datamodule_trains_on_tokenized_batches(tmp_path: Path, tokenizer_file: Path) -> None:
    data = write_text(tmp_path / "data", range(24))
    module = StreamingTextDataModule(
        train=DatasetSpec(local=str(data), shuffle=True),
        tokenizer=str(tokenizer_file),
        max_seq_len=8,
        eos_token_id=2,
        global_batch_size=4,
    )
    model = TinyLanguageModel(vocab_size=256)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
    )
    trainer.fit(model, datamodule=module)

    assert len(model.seen) == 6
    assert set(model.seen[0]) == {"input_ids", "attention_mask", "labels", "sequence_id"}
    expected = StreamingTextDataset(
        tokenizer=str(tokenizer_file), max_seq_len=8, local=str(data), shuffle=True, batch_size=4
    )
    collate = TextCollator.for_tokenizer(expected.tokenizer, eos_token_id=2)
    rows = list(expected)
    for step, batch in enumerate(model.seen):
        reference = collate(rows[step * 4 : step * 4 + 4])
        for key in ("input_ids", "attention_mask", "labels", "sequence_id"):
            assert torch.equal(batch[key], reference[key]), f"step {step}: {key} differs"
