"""examples/packed_attention.py: the boundary fields drive attention that never crosses a document.

The example (also the GPU check, where it adds flash-attention's varlen kernel) compares FlexAttention
masked by ``sequence_id`` with causal attention run on each document alone; here on CPU, small.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "packed_attention.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("packed_attention_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_masked_by_sequence_id_equals_attention_per_document(example: ModuleType) -> None:
    assert example.main(["--block-size", "256", "--batch-size", "2", "--heads", "2", "--head-dim", "16", "--device", "cpu"]) == 0


def test_the_reference_sees_attention_that_crosses_documents(example: ModuleType, tmp_path: Path) -> None:
    """Plain causal attention over the whole block differs from the per-document reference, so the
    comparison above can fail."""
    example.write_documents(tmp_path, documents=64)
    batch = example.read_batch(tmp_path, block_size=256, batch_size=2)
    document = batch["sequence_id"][:, :-1]
    assert int(document.max()) >= 1, "the blocks span several documents"
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((2, 2, 256, 16), generator=generator) for _ in range(3))
    crossing = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert float((crossing - example.reference(q, k, v, document)).abs().max()) > 1e-2


def test_position_ids_count_from_zero_within_each_cu_seqlens_segment(example: ModuleType, tmp_path: Path) -> None:
    example.write_documents(tmp_path, documents=64)
    batch = example.read_batch(tmp_path, block_size=256, batch_size=2)
    example.check_positions(batch, 256)
    batch["position_ids"][0, 5] += 1  # a corrupted field is caught
    with pytest.raises(SystemExit):
        example.check_positions(batch, 256)
