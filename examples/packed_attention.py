"""Packed attention from the token-block dataset's document boundaries, checked against a reference.

Writes a small token dataset (documents ending with EOS), reads one batch of blocks with
``sequence_id``, ``position_ids`` and ``cu_seqlens``, and computes causal attention that must not cross
documents in the ways docs/token-blocks.md shows:

- FlexAttention with a document mask built from ``sequence_id`` (any device);
- ``torch.nn.attention.varlen.varlen_attn`` (flash-attention's varlen kernel) fed the packed
  ``cu_seqlens`` and ``max_seqlen`` (CUDA only);

and compares each with a slow, obvious reference: causal attention run on each document's tokens
alone, document by document, with ``scaled_dot_product_attention``. It also checks that
``position_ids`` count from 0 within each document ``cu_seqlens`` delimits. Exits non-zero on any mismatch.

    python examples/packed_attention.py                  # CUDA when available, else CPU
    python examples/packed_attention.py --block-size 128 --batch-size 2 --device cpu
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from stream_plugin import MDSWriter
from stream_plugin.text import StreamingTokenBlockDataset, collate_token_blocks

EOS = 0


def write_documents(folder: Path, *, documents: int, seed: int = 0) -> None:
    """Documents of 5 to 200 tokens, each ending with EOS, in small shards (blocks cross shard ends)."""
    rng = np.random.default_rng(seed)
    with MDSWriter(out=str(folder), columns={"tokens": "ndarray:int32"}, size_limit=1 << 14) as writer:
        for _ in range(documents):
            body = rng.integers(1, 50_000, int(rng.integers(4, 200)))
            writer.write({"tokens": np.append(body, EOS).astype(np.int32)})


def read_batch(folder: Path, *, block_size: int, batch_size: int) -> dict[str, Any]:
    """One shuffled batch of blocks with every boundary field, collated as for flash-attention."""
    dataset = StreamingTokenBlockDataset(
        local=str(folder), block_size=block_size, batch_size=batch_size, shuffle=True, shuffle_seed=7,
        sequence_id=True, position_ids=True, cu_seqlens=True, eos_token_id=EOS,
    )
    return collate_token_blocks([dataset[index] for index in range(batch_size)])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, document: torch.Tensor) -> torch.Tensor:
    """Causal attention over each document's tokens alone. q, k, v: (B, H, L, D); document: (B, L)."""
    out = torch.empty_like(q)
    for row in range(q.shape[0]):
        for doc in torch.unique(document[row]).tolist():
            where = (document[row] == doc).nonzero().flatten()
            start, end = int(where[0]), int(where[-1]) + 1
            assert end - start == len(where), "a document's tokens are contiguous in a block"
            out[row, :, start:end] = F.scaled_dot_product_attention(
                q[row : row + 1, :, start:end], k[row : row + 1, :, start:end], v[row : row + 1, :, start:end],
                is_causal=True,
            )[0]
    return out


def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, document: torch.Tensor) -> torch.Tensor:
    """docs/token-blocks.md's FlexAttention fragment: a same-document causal mask over each row."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def same_document_causal(b: Any, h: Any, q_index: Any, kv_index: Any) -> Any:
        return (document[b, q_index] == document[b, kv_index]) & (q_index >= kv_index)

    batch, _, length, _ = q.shape
    mask = create_block_mask(same_document_causal, B=batch, H=None, Q_LEN=length, KV_LEN=length, device=q.device)
    result = flex_attention(q, k, v, block_mask=mask)
    assert isinstance(result, torch.Tensor)
    return result


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
    """docs/token-blocks.md's flash-attention fragment, through torch's own varlen kernel (CUDA)."""
    from torch.nn.attention.varlen import varlen_attn

    batch, heads, length, dim = q.shape

    def packed(x: torch.Tensor) -> torch.Tensor:  # (B, H, L, D) -> (B * L, H, D)
        return x.transpose(1, 2).reshape(batch * length, heads, dim)

    causal: dict[str, Any] = (
        {"window_size": (-1, 0)} if "window_size" in inspect.signature(varlen_attn).parameters else {"is_causal": True}
    )
    out = varlen_attn(packed(q), packed(k), packed(v), cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **causal)
    assert isinstance(out, torch.Tensor)
    return out.reshape(batch, length, heads, dim).transpose(1, 2)


def check_positions(batch: dict[str, Any], block_size: int) -> None:
    """``position_ids`` count from 0 within each document the packed ``cu_seqlens`` delimit."""
    positions = batch["position_ids"][:, :-1].reshape(-1)
    cu_seqlens = batch["cu_seqlens"].long()
    assert positions.numel() == batch["input_ids"].shape[0] * block_size == int(cu_seqlens[-1])
    flat = torch.arange(positions.numel())
    segment_start = cu_seqlens[torch.searchsorted(cu_seqlens, flat, right=True) - 1]
    if not torch.equal(positions, flat - segment_start):
        raise SystemExit("position_ids do not count from 0 within each segment of cu_seqlens")
    if int(batch["max_seqlen"]) != int(torch.diff(cu_seqlens).max()):
        raise SystemExit("max_seqlen is not the longest segment of cu_seqlens")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as scratch:
        write_documents(Path(scratch), documents=max(64, args.batch_size * args.block_size // 50))
        batch = read_batch(Path(scratch), block_size=args.block_size, batch_size=args.batch_size)
    check_positions(batch, args.block_size)
    document = batch["sequence_id"][:, :-1].to(device)  # (B, L): the inputs' documents
    dtype = torch.float16 if device.type == "cuda" else torch.float32  # the flash kernel's precision
    generator = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch_size, args.heads, args.block_size, args.head_dim)
    q, k, v = (torch.randn(shape, generator=generator).to(device, dtype) for _ in range(3))
    expected = reference(q.float(), k.float(), v.float(), document)
    tolerance = 1e-2 if dtype == torch.float16 else 1e-4
    crossing = float((F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True) - expected).abs().max())
    documents = int(batch["cu_seqlens"].numel()) - 1
    print(f"device {device}, torch {torch.__version__}: {args.batch_size} blocks of {args.block_size} tokens, "
          f"{documents} document segments, longest {int(batch['max_seqlen'])}; causal attention across "
          f"documents would differ by {crossing:.2e}")
    failures = 0
    results = {"flex_attention": lambda: flex(q, k, v, document)}
    if device.type == "cuda":
        cu_seqlens = batch["cu_seqlens"].to(device)
        results["varlen_attn"] = lambda: varlen(q, k, v, cu_seqlens, int(batch["max_seqlen"]))
    for name, compute in results.items():
        error = float((compute().float() - expected).abs().max())
        ok = error <= tolerance
        failures += not ok
        print(f"{name}: max |difference| from per-document attention {error:.2e} (tolerance {tolerance:.0e}) "
              f"{'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
