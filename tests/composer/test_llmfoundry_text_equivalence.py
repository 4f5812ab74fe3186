"""``name: stream_plugin`` with llm-foundry's text keys yields exactly the batches llm-foundry's own
``text`` loader yields, on raw text, ndarray tokens and legacy token bytes (llm-foundry 0.22.0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

llmfoundry = pytest.importorskip("llmfoundry")

from llmfoundry.data.text_data import build_text_dataloader  # noqa: E402
from llmfoundry.utils.builders import build_tokenizer  # noqa: E402
from llmfoundry_fixtures import MAX_SEQ_LEN, write_datasets, write_tokenizer_folder  # noqa: E402

from stream_plugin.errors import ConfigError  # noqa: E402
from stream_plugin_composer import build_streaming_dataspec  # noqa: E402

BATCH = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path]]:
    root = tmp_path_factory.mktemp("llmfoundry-text")
    tokenizer = build_tokenizer(str(write_tokenizer_folder(root / "tokenizer")), {"model_max_length": MAX_SEQ_LEN})
    return tokenizer, write_datasets(root / "data")


def loader_keys() -> dict[str, Any]:
    # prefetch_factor / persistent_workers as llm-foundry needs them with num_workers=0
    return {"drop_last": False, "num_workers": 0, "prefetch_factor": None, "persistent_workers": False}


def dataset_section(data: Path, cache: Path, **extra: Any) -> dict[str, Any]:
    return {"remote": str(data), "local": str(cache), "split": "train", "max_seq_len": MAX_SEQ_LEN, **extra}


def batches(spec: Any) -> list[dict[str, Any]]:
    torch.manual_seed(5)  # masked-language-model batches draw their masks from torch's global generator
    return [dict(batch) for batch in spec.dataloader]


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("text", {}),
        ("text", {"eos_token_id": 2}),
        ("tokens", {"eos_token_id": 2}),
        ("bytes", {"token_encoding_type": "int32", "bos_token_id": 5, "override_bos_token_id_mismatch_error": True}),
        ("text", {"mlm_probability": 0.3, "eos_token_id": 2}),
    ],
)
def test_batches_match_llm_foundrys_text_loader(
    setup: tuple[Any, dict[str, Path]], tmp_path: Path, kind: str, extra: dict[str, Any]
) -> None:
    tokenizer, data = setup
    theirs = build_text_dataloader(
        tokenizer, BATCH, dataset_section(data[kind], tmp_path / "theirs", **extra), **loader_keys()
    )
    ours = build_streaming_dataspec(
        tokenizer=tokenizer,
        device_batch_size=BATCH,
        dataset=dataset_section(data[kind], tmp_path / "ours", **extra),
        **loader_keys(),
    )
    expected, found = batches(theirs), batches(ours)
    assert len(found) == len(expected) == 200 // BATCH
    for step, (mine, reference) in enumerate(zip(found, expected)):
        assert sorted(mine) == sorted(reference), f"batch {step}: keys differ"
        for key, value in reference.items():
            if torch.is_tensor(value):
                assert torch.equal(mine[key], value), f"batch {step}: {key} differs"
            else:
                assert mine[key] == value, f"batch {step}: {key} differs"
        assert ours.get_num_tokens_in_batch(mine) == theirs.get_num_tokens_in_batch(reference)


def test_text_section_uses_llm_foundrys_loader_defaults(setup: tuple[Any, dict[str, Path]], tmp_path: Path) -> None:
    tokenizer, data = setup
    spec = build_streaming_dataspec(
        tokenizer=tokenizer, device_batch_size=BATCH, dataset=dataset_section(data["text"], tmp_path),
        drop_last=False, num_workers=1,
    )
    assert spec.dataloader.pin_memory is True
    assert spec.dataloader.persistent_workers is True
    assert spec.dataloader.prefetch_factor == 2


def test_eos_token_id_other_than_the_tokenizers_is_refused(setup: tuple[Any, dict[str, Path]], tmp_path: Path) -> None:
    tokenizer, data = setup
    with pytest.raises(ConfigError, match=r"dataset.eos_token_id: expected the tokenizer's eos_token_id 2, found 7; .*override_eos_token_id_mismatch_error"):
        build_streaming_dataspec(
            tokenizer=tokenizer, device_batch_size=BATCH,
            dataset=dataset_section(data["text"], tmp_path, eos_token_id=7), **loader_keys(),
        )


def test_text_keys_without_max_seq_len_are_refused(setup: tuple[Any, dict[str, Path]], tmp_path: Path) -> None:
    tokenizer, data = setup
    section = dataset_section(data["tokens"], tmp_path, eos_token_id=2)
    del section["max_seq_len"]
    with pytest.raises(ConfigError, match=r"dataset.max_seq_len: expected it with llm-foundry's text keys"):
        build_streaming_dataspec(tokenizer=tokenizer, device_batch_size=BATCH, dataset=section, **loader_keys())
