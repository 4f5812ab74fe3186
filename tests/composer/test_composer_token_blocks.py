"""Composer's YAML builder (``name: stream_plugin``) reads token blocks: ``dataset.token_blocks`` with
``StreamingTokenBlockDataset``'s options in a plain section, and ``token_blocks: true`` beside
llm-foundry's text keys; a real ``Trainer`` resumes mid-epoch from its checkpoint exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from composer import Trainer
from composer.core import State
from composer.models import ComposerModel
from composer.optim import DecoupledSGDW
from composer_harness import assert_same_history
from composer_recorder import SampleRecorder
from token_block_fixtures import (
    BLOCK_SIZE,
    BOS,
    EOS,
    MAX_SEQ_LEN,
    VOCAB,
    reference_blocks,
    row_id,
    write_documents,
)

from stream_plugin import StreamingDataLoader
from stream_plugin.errors import ConfigError
from stream_plugin.text import StreamingTokenBlockDataset, collate_token_blocks
from stream_plugin_composer import ExactDataResumption, build_streaming_dataspec

BATCH = 8
BLOCK_OPTIONS = {"block_size": BLOCK_SIZE, "sequence_id": True, "position_ids": True, "cu_seqlens": True, "eos_token_id": EOS}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_documents(tmp_path_factory.mktemp("composer-token-blocks"), "eos")


def plain_section(data: Path, cache: Path, **extra: Any) -> dict[str, Any]:
    return {"remote": str(data), "local": str(cache), "split": "train", "shuffle": True, "shuffle_seed": 9, **extra}


def test_token_blocks_mapping_builds_the_block_dataset_with_its_options(data: Path, tmp_path: Path) -> None:
    spec = build_streaming_dataspec(
        device_batch_size=BATCH, dataset=plain_section(data, tmp_path / "yaml", token_blocks=BLOCK_OPTIONS)
    )
    direct = StreamingTokenBlockDataset(
        **plain_section(data, tmp_path / "direct"), **BLOCK_OPTIONS, batch_size=BATCH  # type: ignore[arg-type]
    )
    expected = list(StreamingDataLoader(direct, batch_size=BATCH, collate_fn=collate_token_blocks))
    loader = spec.dataloader
    assert isinstance(loader, StreamingDataLoader)
    found = list(loader)
    assert len(found) == len(expected) == len(loader) > 10
    for step, (mine, reference) in enumerate(zip(found, expected)):
        assert sorted(mine) == sorted(reference) == sorted(
            ["input_ids", "sequence_id", "position_ids", "cu_seqlens", "max_seqlen"]
        )
        for key, value in reference.items():
            same = torch.equal(mine[key], value) if torch.is_tensor(value) else mine[key] == value
            assert same, f"batch {step}: {key} differs from the directly built dataset's"
        rows = len(reference["input_ids"])
        assert spec.get_num_samples_in_batch(mine) == rows  # cu_seqlens has another length
        assert spec.get_num_tokens_in_batch(mine) == rows * BLOCK_SIZE  # inputs: each token once per pass
    blocks = sorted(tuple(row.tolist()) for batch in found for row in batch["input_ids"])
    assert blocks == sorted(tuple(block.tolist()) for block in reference_blocks("eos"))


def test_block_sequence_id_with_eos_equals_llm_foundrys_and_bos_splits_the_same_documents(
    data: Path, tmp_path: Path
) -> None:
    llmfoundry_text = pytest.importorskip("llmfoundry.data.text_data")
    spec = build_streaming_dataspec(
        device_batch_size=BATCH,
        dataset=plain_section(data, tmp_path / "eos", token_blocks={"block_size": BLOCK_SIZE, "sequence_id": True, "eos_token_id": EOS}),
    )
    theirs = llmfoundry_text.ConcatenatedSequenceCollatorWrapper(lambda rows: {"input_ids": torch.stack(rows)}, eos_token_id=EOS)
    for batch in spec.dataloader:
        expected = theirs(list(batch["input_ids"]))["sequence_id"]
        assert torch.equal(batch["sequence_id"], expected)
    # BOS: llm-foundry numbers a block that opens with BOS from 1, ours from 0; the documents are the same.
    bos_data = write_documents(tmp_path / "bos-data", "bos")
    spec = build_streaming_dataspec(
        device_batch_size=BATCH,
        dataset=plain_section(bos_data, tmp_path / "bos", token_blocks={"block_size": BLOCK_SIZE, "sequence_id": True, "bos_token_id": BOS}),
    )
    theirs = llmfoundry_text.ConcatenatedSequenceCollatorWrapper(lambda rows: {"input_ids": torch.stack(rows)}, bos_token_id=BOS)
    for batch in spec.dataloader:
        expected = theirs(list(batch["input_ids"]))["sequence_id"]
        opens_with_bos = (batch["input_ids"][:, :1] == BOS).long()  # (B, 1)
        assert torch.equal(batch["sequence_id"] + opens_with_bos, expected)


def test_token_blocks_in_a_plain_section_need_block_size(data: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token_blocks: expected a mapping of StreamingTokenBlockDataset options with block_size, found True"):
        build_streaming_dataspec(device_batch_size=BATCH, dataset=plain_section(data, tmp_path, token_blocks=True))


def test_unknown_token_blocks_option_is_refused(data: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token_blocks: expected keys among .*'block_size'.* found unknown \['blok'\]"):
        build_streaming_dataspec(
            device_batch_size=BATCH, dataset=plain_section(data, tmp_path, token_blocks={"block_size": 4, "blok": 1})
        )


# ---------------------------------------------------------------------- a real Trainer, resumed
class TinyCausalLM(ComposerModel):
    """Embedding + linear head; the loss shifts labels by one, as llm-foundry's models do."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        assert batch["sequence_id"].shape == batch["input_ids"].shape  # what attn_uses_sequence_id reads
        return self.head(self.embed(batch["input_ids"]))  # (B, L, VOCAB)

    def loss(self, outputs: torch.Tensor, batch: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        logits, targets = outputs[:, :-1], batch["labels"][:, 1:]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)


class BlockRecorder(SampleRecorder):
    def batch_ids(self, state: State) -> list[int]:
        return [row_id(row) for row in state.batch["input_ids"]]


def train(data: Path, root: Path, *, max_duration: str, save_interval: str | None = None, load_path: str | None = None) -> tuple[list[list[int]], int]:
    """Train on an llm-foundry text section with token blocks; the blocks' history and the token clock."""
    recorder = BlockRecorder(out=str(root / "history.json"))
    model = TinyCausalLM()
    spec = build_streaming_dataspec(
        device_batch_size=BATCH,
        dataset={
            "remote": str(data), "local": str(root / "cache"), "split": "train", "shuffle": True,
            "shuffle_seed": 9, "max_seq_len": MAX_SEQ_LEN, "eos_token_id": EOS, "token_blocks": True,
        },
        drop_last=True,
    )
    trainer = Trainer(
        model=model, train_dataloader=spec, optimizers=DecoupledSGDW(model.parameters(), lr=0.01),
        max_duration=max_duration, callbacks=[recorder, ExactDataResumption()], device="cpu", seed=17,
        save_folder=str(root / "checkpoints") if save_interval else None, save_interval=save_interval or "1ep",
        save_num_checkpoints_to_keep=-1, load_path=load_path, progress_bar=False, log_to_console=False,
    )
    try:
        trainer.fit()
        return recorder.history, int(trainer.state.timestamp.token)
    finally:
        trainer.close()


def test_token_block_run_resumes_mid_epoch_exactly_and_counts_llm_foundrys_tokens(data: Path, tmp_path: Path) -> None:
    per_epoch = len(reference_blocks("eos")) // BATCH  # drop_last
    end, saved = per_epoch + 6, per_epoch + 3  # the checkpoint is 3 batches into epoch 1
    reference, tokens = train(data, tmp_path / "reference", max_duration=f"{end}ba")
    assert len(reference) == end
    assert [batch[0] for batch in reference] == [0] * per_epoch + [1] * 6
    assert tokens == end * BATCH * MAX_SEQ_LEN  # max_seq_len per block, as llm-foundry counts

    root = tmp_path / "resumed"
    train(data, root, max_duration=f"{saved}ba", save_interval=f"{saved}ba")
    checkpoint = root / "checkpoints" / f"ep1-ba{saved}-rank0.pt"
    assert checkpoint.exists(), sorted(path.name for path in checkpoint.parent.iterdir())
    resumed, resumed_tokens = train(data, root, max_duration=f"{end}ba", load_path=str(checkpoint))
    assert_same_history(resumed, reference)
    assert resumed_tokens == tokens
