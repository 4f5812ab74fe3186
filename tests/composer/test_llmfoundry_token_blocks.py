"""An llm-foundry pre-training ``train_loader`` with ``name: stream_plugin`` and ``token_blocks: true``
reads token blocks: ``StreamingTokenBlockDataset``'s blocks of ``max_seq_len`` tokens, batched exactly
as llm-foundry 0.22.0's own ``text`` collator batches them (``sequence_id`` from ``eos_token_id`` /
``bos_token_id`` included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

llmfoundry = pytest.importorskip("llmfoundry")

from llmfoundry.data.utils import get_text_collator  # noqa: E402
from llmfoundry.utils.builders import build_tokenizer  # noqa: E402
from llmfoundry_fixtures import write_tokenizer_folder  # noqa: E402
from support.text_data import write_text  # noqa: E402
from token_block_fixtures import BLOCK_SIZE, BOS, EOS, MAX_SEQ_LEN, reference_blocks, write_documents  # noqa: E402

from stream_plugin import StreamingDataLoader  # noqa: E402
from stream_plugin.errors import ConfigError  # noqa: E402
from stream_plugin.text import StreamingTokenBlockDataset, collate_token_blocks  # noqa: E402
from stream_plugin_composer import build_streaming_dataspec  # noqa: E402

BATCH = 8
SPLIT_KEYS = {
    "eos": {"eos_token_id": EOS},
    "bos": {"bos_token_id": BOS, "override_bos_token_id_mismatch_error": True},  # the tokenizer has no BOS
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = write_tokenizer_folder(tmp_path_factory.mktemp("token-blocks-tokenizer"))
    return build_tokenizer(str(folder), {"model_max_length": MAX_SEQ_LEN})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {kind: write_documents(tmp_path_factory.mktemp(f"token-blocks-{kind}"), kind) for kind in SPLIT_KEYS}


def foundry_section(data: Path, cache: Path, **extra: Any) -> dict[str, Any]:
    """llm-foundry's pre-training ``dataset`` keys, plus ``token_blocks: true``."""
    return {
        "remote": str(data), "local": str(cache), "split": "train", "max_seq_len": MAX_SEQ_LEN,
        "shuffle": True, "shuffle_seed": 9, "token_blocks": True, **extra,
    }


def build(tokenizer: Any, section: dict[str, Any], **loader: Any) -> Any:
    return build_streaming_dataspec(
        tokenizer=tokenizer, device_batch_size=BATCH, dataset=section, drop_last=False, num_workers=0, **loader
    )


def direct_blocks(data: Path, cache: Path, *, shuffle: bool = True) -> list[torch.Tensor]:
    """Batches of ``StreamingTokenBlockDataset`` built directly with the same options: (B, 16) each."""
    dataset = StreamingTokenBlockDataset(
        remote=str(data), local=str(cache), split="train", block_size=BLOCK_SIZE,
        shuffle=shuffle, shuffle_seed=9, batch_size=BATCH,
    )
    return list(StreamingDataLoader(dataset, batch_size=BATCH, collate_fn=collate_token_blocks))


@pytest.mark.parametrize("kind", sorted(SPLIT_KEYS))
def test_token_block_batches_equal_llm_foundrys_collator_over_the_directly_built_blocks(
    tokenizer: Any, data: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    spec = build(tokenizer, foundry_section(data[kind], tmp_path / "yaml", **SPLIT_KEYS[kind]))
    found = [dict(batch) for batch in spec.dataloader]
    blocks = direct_blocks(data[kind], tmp_path / "direct")
    theirs, _ = get_text_collator({"dataset": dict(SPLIT_KEYS[kind])}, tokenizer, BATCH)
    assert len(found) == len(blocks) == len(spec.dataloader) > 10
    for step, (mine, rows) in enumerate(zip(found, blocks)):
        reference = theirs(list(rows))  # llm-foundry's batch of the same blocks
        assert sorted(mine) == sorted(reference) == sorted(
            ["input_ids", "labels", "sequence_id", "total_tokens", "loss_generating_tokens"]
        ), f"batch {step}: keys differ"
        assert mine["input_ids"].shape == (len(rows), MAX_SEQ_LEN)
        for key, value in reference.items():
            same = torch.equal(mine[key], value) if torch.is_tensor(value) else mine[key] == value
            assert same, f"batch {step}: {key} differs from llm-foundry's collator"
        assert spec.get_num_tokens_in_batch(mine) == len(rows) * MAX_SEQ_LEN  # llm-foundry's count
        assert spec.get_num_samples_in_batch(mine) == len(rows)


def test_token_blocks_in_order_are_the_concatenated_documents_cut_every_max_seq_len_minus_one(
    tokenizer: Any, data: dict[str, Path], tmp_path: Path
) -> None:
    spec = build(tokenizer, foundry_section(data["eos"], tmp_path, shuffle=False, eos_token_id=EOS))
    rows = [row for batch in spec.dataloader for row in batch["input_ids"]]
    expected = reference_blocks("eos")
    assert len(rows) == len(expected)
    for index, (row, block) in enumerate(zip(rows, expected)):
        assert torch.equal(row, block), f"block {index}: expected {block.tolist()}, found {row.tolist()}"


def test_shuffled_token_blocks_read_every_block_once_per_epoch(
    tokenizer: Any, data: dict[str, Path], tmp_path: Path
) -> None:
    spec = build(tokenizer, foundry_section(data["eos"], tmp_path, eos_token_id=EOS))
    found = sorted(tuple(row.tolist()) for batch in spec.dataloader for row in batch["input_ids"])
    expected = [tuple(block.tolist()) for block in reference_blocks("eos")]
    assert found == sorted(expected)
    assert found != expected  # shuffled


def test_token_blocks_with_llm_foundrys_loader_defaults(tokenizer: Any, data: dict[str, Path], tmp_path: Path) -> None:
    spec = build_streaming_dataspec(
        tokenizer=tokenizer, device_batch_size=BATCH, dataset=foundry_section(data["eos"], tmp_path),
        drop_last=False, num_workers=1,
    )
    loader = spec.dataloader
    assert isinstance(loader, StreamingDataLoader)
    assert (loader.pin_memory, loader.persistent_workers, loader.prefetch_factor) == (True, True, 2)
    assert isinstance(loader.dataset, StreamingTokenBlockDataset)
    assert loader.dataset.block_size == MAX_SEQ_LEN - 1


def test_token_blocks_refuse_mlm_probability(tokenizer: Any, data: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mlm_probability: expected it unset with token_blocks .* found 0.15"):
        build(tokenizer, foundry_section(data["eos"], tmp_path, mlm_probability=0.15))


def test_token_blocks_beside_text_keys_must_be_true(tokenizer: Any, data: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token_blocks: expected true with llm-foundry's text keys .* found \{'block_size': 8\}"):
        build(tokenizer, foundry_section(data["eos"], tmp_path, token_blocks={"block_size": 8}))


def test_token_blocks_over_a_text_column_are_refused(tokenizer: Any, tmp_path: Path) -> None:
    text = write_text(tmp_path / "text" / "train", range(20)).parent
    with pytest.raises(ConfigError, match=r"column: expected a token column 'tokens' in every sample, found columns \['text'\]"):
        build(tokenizer, foundry_section(text, tmp_path / "cache"))


def test_an_mpt_model_with_attn_uses_sequence_id_trains_on_the_blocks_documents(
    tokenizer: Any, data: dict[str, Path], tmp_path: Path
) -> None:
    from llmfoundry.models.mpt import MPTConfig, MPTForCausalLM

    torch.manual_seed(0)
    config = MPTConfig(
        d_model=32, n_heads=2, n_layers=2, expansion_ratio=2, max_seq_len=MAX_SEQ_LEN, vocab_size=128,
        init_device="cpu", attn_config={"attn_impl": "torch", "attn_uses_sequence_id": True},
    )
    model = MPTForCausalLM(config)
    spec = build(tokenizer, foundry_section(data["eos"], tmp_path, eos_token_id=EOS))
    batch = next(iter(spec.dataloader))
    assert int(batch["sequence_id"].max()) > 0  # the rows hold several documents

    def loss(sequence_id: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=batch["input_ids"], sequence_id=sequence_id).logits  # (B, 16, 128)
        targets = batch["labels"][:, 1:]  # the model's shift, as llm-foundry's loss makes it
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128), targets.reshape(-1))

    documents = loss(batch["sequence_id"])
    assert torch.isfinite(documents)
    assert not torch.allclose(documents, loss(torch.zeros_like(batch["sequence_id"])))  # attention read them
    documents.backward()
