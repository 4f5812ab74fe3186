"""StreamingTextDataset: stored samples become model inputs as in llm-foundry's text dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.text_data import EOS, PAD, document, token_row, write_text, write_tokens
from tokenizers import Tokenizer

from stream_plugin import ConfigError, EncodingError, MDSWriter, StreamingDataLoader
from stream_plugin.text import StreamingTextDataset, TextCollator, as_text_tokenizer


def test_text_column_is_tokenized_and_padded_to_max_seq_len(tmp_path: Path, tokenizer_file: Path) -> None:
    write_text(tmp_path / "data", range(4))
    dataset = StreamingTextDataset(tokenizer=str(tokenizer_file), max_seq_len=16, local=str(tmp_path / "data"))
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    sample = dataset[3]
    ids = tokenizer.encode(document(3)).ids  # doc3 + 4 words + EOS = 6 tokens
    assert sample["input_ids"].tolist() == ids + [tokenizer.token_to_id(PAD)] * (16 - len(ids))
    assert sample["attention_mask"].tolist() == [1] * len(ids) + [0] * (16 - len(ids))
    assert sample["input_ids"].dtype == torch.int64


def test_long_text_is_truncated_keeping_the_end_token(tmp_path: Path, tokenizer_file: Path) -> None:
    write_text(tmp_path / "data", [11])  # doc11 + 12 words + EOS = 14 tokens
    dataset = StreamingTextDataset(tokenizer=str(tokenizer_file), max_seq_len=5, local=str(tmp_path / "data"))
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    full = tokenizer.encode(document(11)).ids
    assert dataset[0]["input_ids"].tolist() == full[:4] + [tokenizer.token_to_id(EOS)]
    assert dataset[0]["attention_mask"].tolist() == [1] * 5


def test_tokens_ndarray_is_cut_to_max_seq_len_as_int64(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [7], length=12, encoding="ndarray:uint16")
    dataset = StreamingTextDataset(max_seq_len=10, local=str(tmp_path / "data"))
    assert dataset[0].tolist() == token_row(7, 10).tolist()
    assert dataset[0].dtype == torch.int64


def test_tokens_bytes_are_decoded_with_token_encoding_type(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [5], length=6, encoding="bytes")  # raw int32 bytes
    dataset = StreamingTextDataset(max_seq_len=6, token_encoding_type="int32", local=str(tmp_path / "data"))
    assert dataset[0].tolist() == token_row(5, 6).tolist()


def test_token_bytes_of_another_width_are_refused(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "data"), columns={"tokens": "bytes"}) as writer:
        writer.write({"tokens": b"\x01\x02\x03"})
    dataset = StreamingTextDataset(max_seq_len=6, local=str(tmp_path / "data"))
    with pytest.raises(EncodingError, match=r"expected a multiple of 8 bytes .*found 3 bytes; set token_encoding_type"):
        dataset[0]


def test_input_ids_ndarray_column_is_used_as_stored(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [3], length=8, column="input_ids", encoding="ndarray:int64")
    dataset = StreamingTextDataset(max_seq_len=8, local=str(tmp_path / "data"))
    assert dataset[0].tolist() == token_row(3, 8).tolist()


def test_unknown_token_encoding_type_is_refused(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [0])
    with pytest.raises(ConfigError, match=r"token_encoding_type: expected one of \[.*'uint64'\] .*found 'float32'"):
        StreamingTextDataset(max_seq_len=4, token_encoding_type="float32", local=str(tmp_path / "data"))


def test_max_seq_len_must_be_a_whole_number(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [0])
    with pytest.raises(ConfigError, match=r"max_seq_len: expected a whole number >= 1 .*found 2.5"):
        StreamingTextDataset(max_seq_len=2.5, local=str(tmp_path / "data"))  # type: ignore[arg-type]
    assert StreamingTextDataset(max_seq_len=4.0, local=str(tmp_path / "data")).max_seq_len == 4  # type: ignore[arg-type]


def test_text_shards_without_a_tokenizer_are_refused_at_construction(tmp_path: Path) -> None:
    write_text(tmp_path / "data", range(2))
    with pytest.raises(ConfigError, match=r"tokenizer: expected a tokenizer, since the shards have a `text` column"):
        StreamingTextDataset(max_seq_len=8, local=str(tmp_path / "data"))


def test_tokenizer_without_padding_is_refused(tmp_path: Path, tokenizer_file: Path) -> None:
    write_text(tmp_path / "data", range(2))
    bare = Tokenizer.from_file(str(tokenizer_file))
    bare.no_padding()
    dataset = StreamingTextDataset(tokenizer=bare, max_seq_len=8, local=str(tmp_path / "data"))
    with pytest.raises(ConfigError, match=r"expected a padding token .*call tokenizer.enable_padding"):
        dataset[0]


def test_samples_without_a_token_column_are_refused(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path / "data"), columns={"label": "int"}) as writer:
        writer.write({"label": 1})
    dataset = StreamingTextDataset(max_seq_len=8, local=str(tmp_path / "data"))
    with pytest.raises(ConfigError, match=r"expected a sample with a `text`, `tokens` or `input_ids`.*found columns \['label'\]"):
        dataset[0]


def test_non_default_stream_name_is_refused(tmp_path: Path) -> None:
    write_tokens(tmp_path / "data", [0])
    with pytest.raises(ConfigError, match=r"stream_name / stream_config: expected the default Stream"):
        StreamingTextDataset(max_seq_len=4, stream_name="custom", local=str(tmp_path / "data"))


def test_unsupported_tokenizer_object_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"tokenizer: expected a transformers tokenizer, .*found int"):
        as_text_tokenizer(3)


def test_text_loader_with_workers_yields_the_same_batches(tmp_path: Path, tokenizer_file: Path) -> None:
    write_text(tmp_path / "data", range(40))

    def batches(num_workers: int) -> list[dict[str, torch.Tensor]]:
        dataset = StreamingTextDataset(
            tokenizer=str(tokenizer_file), max_seq_len=8, local=str(tmp_path / "data"), shuffle=True
        )
        collate = TextCollator.for_tokenizer(dataset.tokenizer)
        return list(StreamingDataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=collate))

    inline, in_workers = batches(0), batches(2)
    assert len(inline) == 10
    for one, other in zip(inline, in_workers):
        assert set(one) == {"input_ids", "attention_mask", "labels", "total_tokens", "loss_generating_tokens"}
        assert torch.equal(one["input_ids"], other["input_ids"])
    first_words = sorted(int(row[0]) for batch in inline for row in batch["input_ids"])
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    assert first_words == sorted(tokenizer.token_to_id(f"doc{i}") for i in range(40))
    assert np.all([batch["input_ids"].shape == (4, 8) for batch in inline])
