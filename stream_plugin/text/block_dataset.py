"""``StreamingTokenBlockDataset``: fixed-size token blocks read across sample boundaries at read time.

Each stream's samples are one flat token stream (``stream_plugin.text.blocks``), cut into blocks of
``block_size`` inputs plus one label token. The block is this dataset's sample: the order, partitioning,
mixing (a stream's share of blocks is its share of tokens), resume state and chunked planning of
``StreamingDataset`` apply to block ids unchanged. Only the table the order is planned over changes
(the ``sample_table`` hook): shards hold blocks (those that start in them) instead of samples.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal, get_args

import numpy as np
import torch

from stream_plugin.errors import ConfigError, EmptyStreamError, StateError
from stream_plugin.reading.dataset import StreamingDataset
from stream_plugin.reading.dataset_plan import SampleTable, StreamSamples
from stream_plugin.reading.pass_reading import PassReading
from stream_plugin.reading.shard_table import ShardTable
from stream_plugin.reading.state import fingerprint as make_fingerprint
from stream_plugin.reading.stream import Stream
from stream_plugin.text.blocks import block_runs, block_runs_many, blocks_per_shard, num_blocks, token_offsets
from stream_plugin.text.documents import (
    document_lengths_from_bos,
    document_lengths_from_eos,
    documents_from_lengths,
)
from stream_plugin.text.samples import check_token_encoding_type
from stream_plugin.text.token_counts import cached_counts, count_tokens, counts_path
from stream_plugin.text.token_views import TokenViews
from stream_plugin.units import parse_whole_number

_SIZE_IN_FINGERPRINT = re.compile(r":block_size=(\d+)$")

BlockDtype = Literal["int64", "stored"]
DOCUMENT_FIELDS = ("sequence_id", "position_ids", "cu_seqlens")


def check_block_size(value: Any) -> int:
    return parse_whole_number(
        value, name="block_size", meaning="input tokens per block", fix="set e.g. block_size=2048"
    )


class StreamingTokenBlockDataset(StreamingDataset):
    """Streams blocks of ``block_size + 1`` consecutive tokens, read across sample boundaries.

    Each item is a 1-D tensor of ``block_size + 1`` tokens: ``item[:-1]`` are the inputs and
    ``item[1:]`` the labels (nanoGPT's ``x, y``). Consecutive blocks of a stream share one token (the
    last of one is the first of the next), so every token is an input exactly once per pass.

    With ``sequence_id``, ``position_ids`` or ``cu_seqlens`` on, each item is a dict instead:
    ``input_ids`` (the block), and the fields asked for, which say where documents start inside the
    block (``stream_plugin.text.documents``); batch them with ``collate_token_blocks``.

    Args:
        block_size: input tokens per block.
        column: the column that holds each sample's tokens (an int ``ndarray``, a ``json`` list, ``bytes``).
        token_encoding_type: the dtype of tokens stored as raw ``bytes``; ndarray columns carry their own.
        dtype: ``"int64"`` (what embeddings and losses take) or ``"stored"``: the column's own dtype
            (``uint16``, ``int32``), a quarter or half of the bytes to copy and hand between processes.
        sequence_id: add each token's document index within the block (llm-foundry's ``sequence_id``).
        position_ids: add each token's position in its document, restarting at 0 at each document.
        cu_seqlens: add the cumulative document lengths of the block's inputs (int32, flash-attention).
        eos_token_id: documents end after this token (for data without document structure); by
            default each sample is a document.
        bos_token_id: documents start at this token instead (llm-foundry's other choice).
        Every other argument is ``StreamingDataset``'s; counts in it (``epoch_size``, a stream's
        ``choose``, ``shuffle_block_size``, ``batch_size``) are counted in blocks, and ``proportion``
        is a share of blocks, that is of tokens.
    """

    def __init__(
        self,
        *,
        block_size: int,
        column: str = "tokens",
        token_encoding_type: str = "int64",
        dtype: BlockDtype = "int64",
        sequence_id: bool = False,
        position_ids: bool = False,
        cu_seqlens: bool = False,
        eos_token_id: int | None = None,
        bos_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.block_size = check_block_size(block_size)
        self.column = str(column)
        self.token_encoding_type = check_token_encoding_type(token_encoding_type)
        self.dtype = check_block_dtype(dtype)
        asked = {"sequence_id": sequence_id, "position_ids": position_ids, "cu_seqlens": cu_seqlens}
        self.document_fields: tuple[str, ...] = tuple(name for name in DOCUMENT_FIELDS if asked[name])
        self.eos_token_id = check_split_token(eos_token_id, self.document_fields, name="eos_token_id")
        self.bos_token_id = check_split_token(bos_token_id, self.document_fields, name="bos_token_id")
        if self.eos_token_id is not None and self.bos_token_id is not None:
            raise ConfigError(
                f"eos_token_id / bos_token_id: expected one token that splits documents, found both "
                f"({self.eos_token_id} and {self.bos_token_id}); pass eos_token_id if documents end "
                "with an EOS token, or bos_token_id if they start with a BOS token"
            )
        super().__init__(**kwargs)
        # Scalar lookups of the read path, as Python lists (bisect beats numpy on one value).
        samples, blocks = self.plan.shards, self.plan.table
        self._num_blocks = blocks.num_samples
        self._first_block_per_stream: list[int] = blocks.sample_offset_per_stream.tolist()
        self._first_sample_per_stream: list[int] = samples.sample_offset_per_stream.tolist()
        self._first_sample_per_shard: list[int] = samples.sample_offset_per_shard.tolist()
        self._token_views = TokenViews(self.column, self.token_encoding_type)
        self._cast: type[np.integer[Any]] | None = np.int64 if self.dtype == "int64" else None

    def sample_table(self, streams: StreamSamples) -> SampleTable:
        """Blocks, not samples: each shard holds the blocks that start in it (the ``sample_table`` hook).

        Counts each stream's tokens (kept beside its index, see ``token_counts``) and keeps, per stream,
        the first token of each sample for reading. The fingerprint adds ``column``, the token encoding
        and ``block_size`` to the samples' one.
        """
        table = streams.samples.table
        self._token_offsets = [
            token_offsets(_count_stream_tokens(streams, stream, self.column, self.token_encoding_type))
            for stream in range(len(self.streams))
        ]  # per stream: (samples + 1,) first token of each sample
        blocks: list[list[int]] = []
        for stream, offsets in enumerate(self._token_offsets):
            first = int(table.shard_offset_per_stream[stream])
            shards = slice(first, first + int(table.shards_per_stream[stream]) + 1)
            local_offsets = table.sample_offset_per_shard[shards] - table.sample_offset_per_stream[stream]
            blocks.append(blocks_per_shard(offsets, local_offsets, self.block_size).tolist())
        _refuse_streams_without_blocks(self.streams, self._token_offsets, self.block_size)
        digest = make_fingerprint(
            {
                "samples": streams.samples.fingerprint,
                "column": self.column,
                "token_encoding_type": self.token_encoding_type,
            }
        )
        return SampleTable(ShardTable.from_counts(blocks), f"{digest}:block_size={self.block_size}")

    # ------------------------------------------------------------------ reading
    @property
    def tokens_per_stream(self) -> np.ndarray:
        """Tokens in each stream's flat token stream (before cutting it into blocks): ``(streams,)``."""
        return np.array([int(offsets[-1]) for offsets in self._token_offsets], np.int64)

    @property
    def num_tokens(self) -> int:
        """Tokens in all streams."""
        return int(self.tokens_per_stream.sum())

    def get_item(self, sample_id: int) -> torch.Tensor | dict[str, torch.Tensor]:
        """Block ``sample_id`` (a global block id): ``block_size + 1`` tokens, or a dict with the document
        fields asked for (see the class)."""
        stream = bisect_right(self._first_block_per_stream, sample_id) - 1
        block = sample_id - self._first_block_per_stream[stream]
        first_sample = self._first_sample_per_stream[stream]
        runs = block_runs(self._token_offsets[stream], self.block_size, block)
        access, views, first_per_shard = self._shard_access(), self._token_views, self._first_sample_per_shard
        if views.capacity is None:  # this process's first read
            views.capacity = access.max_open
        parts = []
        for sample, begin, end, count in runs:
            sample_id = first_sample + sample
            shard = bisect_right(first_per_shard, sample_id) - 1
            index = sample_id - first_per_shard[shard]
            parts.append(views.tokens(access.reader(shard), shard, index, count)[begin:end])
        # One copy of the shard's memory into the block (a new array, so the item is writable).
        if len(parts) == 1:
            tokens = parts[0].astype(self._cast or parts[0].dtype)
        else:
            tokens = np.empty(self.block_size + 1, self._cast or np.result_type(*parts))
            at = 0
            for part in parts:
                tokens[at : at + len(part)] = part
                at += len(part)
        if not self.document_fields:
            return torch.from_numpy(tokens)
        if self.eos_token_id is not None:
            lengths = document_lengths_from_eos(tokens, self.eos_token_id)
        elif self.bos_token_id is not None:
            lengths = document_lengths_from_bos(tokens, self.bos_token_id)
        else:
            lengths = np.array([end - begin for _, begin, end, _ in runs], np.int64)  # (documents,)
        documents = documents_from_lengths(lengths)
        item = {"input_ids": torch.from_numpy(tokens)}
        for name in self.document_fields:
            item[name] = torch.from_numpy(getattr(documents, name))
        return item

    def get_items(self, sample_ids: np.ndarray) -> Sequence[torch.Tensor | dict[str, torch.Tensor]]:
        """Blocks ``sample_ids`` (global block ids), as ``get_item`` gives them one by one. The pass reads
        through this, a stride of blocks per call: the stride's token runs are found with a few numpy
        calls and copied into one ``(blocks, block_size + 1)`` array at once, whose rows are the items
        (views of it: a block kept alive keeps its stride's array)."""
        ids = np.asarray(sample_ids, np.int64).reshape(-1)  # (n,)
        if self.document_fields or not len(ids):
            return [self.get_item(sample_id) for sample_id in ids.tolist()]
        parts = self._token_parts(ids)
        dtypes = {part.dtype for part in parts}
        if len(dtypes) > 1 and self._cast is None:  # samples stored with several dtypes: block by block
            return [self.get_item(sample_id) for sample_id in ids.tolist()]
        blocks = np.empty((len(ids), self.block_size + 1), self._cast or dtypes.pop())  # (n, block_size + 1)
        np.concatenate(parts, out=blocks.reshape(-1))
        return torch.from_numpy(blocks).unbind(0)

    def _token_parts(self, ids: np.ndarray) -> list[np.ndarray]:
        """The token runs of blocks ``ids`` in order (their concatenation is the blocks, one after another),
        each a view of a sample's tokens (``TokenViews``)."""
        first_block = self._first_block_per_stream
        runs: tuple[np.ndarray, ...]  # (row, sample, begin, end, count), each (runs,)
        if len(first_block) == 1:
            runs = block_runs_many(self._token_offsets[0], self.block_size, ids)
            samples = runs[1]  # (runs,) global sample ids: the one stream's are its local ones
        else:
            streams = np.searchsorted(first_block, ids, side="right") - 1  # (n,)
            pieces = []
            for stream in np.unique(streams).tolist():
                rows = np.flatnonzero(streams == stream)  # (blocks of the stream,) positions in ids
                row, sample, *rest = block_runs_many(
                    self._token_offsets[stream], self.block_size, ids[rows] - first_block[stream]
                )
                pieces.append((rows[row], sample + self._first_sample_per_stream[stream], *rest))
            order = np.argsort(np.concatenate([piece[0] for piece in pieces]), kind="stable")  # (runs,)
            runs = tuple(np.concatenate([piece[field] for piece in pieces])[order] for field in range(5))
            samples = runs[1]
        first_per_shard = self.plan.shards.sample_offset_per_shard  # (shards + 1,)
        shards = np.searchsorted(first_per_shard, samples, side="right") - 1  # (runs,)
        indices = samples - first_per_shard[shards]  # (runs,) within the shard
        access, views = self._shard_access(), self._token_views
        if views.capacity is None:  # this process's first read
            views.capacity = access.max_open
        parts = []
        current, kept, file = -1, None, None
        for shard, index, begin, end, count in zip(
            shards.tolist(), indices.tolist(), runs[2].tolist(), runs[3].tolist(), runs[4].tolist()
        ):
            if shard != current:
                kept = views.of_shard(access.reader(shard), shard, index)
                current, file = shard, kept.file
            assert kept is not None
            if file is not None:  # a slice of the shard's file
                parts.append(kept.tail_of(index, begin, end, count))
                continue
            tokens = kept.samples[index]
            if tokens is None:
                tokens = views.read(kept, index, count)
            parts.append(tokens[begin:end])
        return parts

    def _pass_reading(self) -> PassReading:
        """The pass reads a stride of blocks per ``get_items`` call, unless a subclass fetches its items
        one by one (it overrides ``get_item`` or ``__getitem__`` below this class's ``get_items``)."""
        reading = super()._pass_reading()
        if reading.fetch is None or not _defined_as_low(type(self), "get_items", reading.fetch.__name__):
            return reading
        return replace(reading, fetch_many=self.get_items)

    # ------------------------------------------------------------------ resumption
    def load_state_dict(self, obj: dict[str, Any] | None, *, strict: bool = True) -> None:
        """As ``StreamingDataset``'s; a state taken at another ``block_size`` is refused (``strict``).

        The state is ``StreamingDataset``'s (positions count blocks); its fingerprint ends with the
        ``block_size``, so the size survives any integration that carries the state.
        """
        saved = saved_block_size(obj)
        if strict and saved is not None and saved != self.block_size:
            raise StateError(
                f"block_size: expected {saved} as in the checkpoint, found {self.block_size}; blocks of "
                f"another size are other samples, so the position cannot carry over. Pass "
                f"block_size={saved} to resume, or load_state_dict(state, strict=False) to continue at "
                "the same block count in the new blocks"
            )
        super().load_state_dict(obj, strict=strict)


def _defined_as_low(kind: type, name: str, other: str) -> bool:
    """Whether ``kind``'s ``name`` comes from a class at least as derived as its ``other``'s."""
    owners = [
        next(index for index, cls in enumerate(kind.__mro__) if key in vars(cls)) for key in (name, other)
    ]
    return owners[0] <= owners[1]


def check_block_dtype(value: Any) -> BlockDtype:
    choices: tuple[BlockDtype, ...] = get_args(BlockDtype)
    if value not in choices:
        raise ConfigError(
            f"dtype: expected one of {list(choices)} (int64 tokens, or the column's stored dtype), found "
            f"{value!r}; pass dtype='stored' to keep uint16/int32 tokens, else leave the default"
        )
    return value


def check_split_token(value: Any, fields: Sequence[str], *, name: str) -> int | None:
    """A token id that splits documents (``eos_token_id`` / ``bos_token_id``), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 0:
        raise ConfigError(
            f"{name}: expected a token id (an int >= 0) or None, found {value!r}; pass the "
            "tokenizer's id, or leave it out to take each sample as a document"
        )
    if not fields:
        raise ConfigError(
            f"{name}: expected it with a document field ({', '.join(f'{name}=True' for name in DOCUMENT_FIELDS)}), "
            f"found {name}={value} alone, which changes nothing; turn one of them on, or leave {name} out"
        )
    return int(value)


def saved_block_size(obj: object) -> int | None:
    """The ``block_size`` a resume state was taken at (from its fingerprint), or None for another dataset's."""
    fingerprint = obj.get("fingerprint") if isinstance(obj, dict) else None
    found = _SIZE_IN_FINGERPRINT.search(fingerprint) if isinstance(fingerprint, str) else None
    return int(found.group(1)) if found else None


def _count_stream_tokens(
    streams: StreamSamples, stream: int, column: str, token_encoding_type: str
) -> np.ndarray:
    """Tokens of each sample of stream ``stream``, counted once per index (cached beside it)."""
    table = streams.samples.table
    first = int(table.shard_offset_per_stream[stream])
    shard_ids = list(range(first, first + int(table.shards_per_stream[stream])))
    path = counts_path(
        streams.opened.cache_specs[stream].config.local,
        streams.opened.index_digests[stream],
        column,
        token_encoding_type,
    )
    access = streams.readers.access()
    return cached_counts(path, lambda: count_tokens(access, shard_ids, column, token_encoding_type))


def _refuse_streams_without_blocks(
    streams: Sequence[Stream], offsets: Sequence[np.ndarray], block_size: int
) -> None:
    for stream, stream_offsets in zip(streams, offsets):
        tokens = int(stream_offsets[-1])
        if not num_blocks(tokens, block_size):
            raise EmptyStreamError(
                f"block_size: expected every stream to hold at least block_size + 1 = {block_size + 1} "
                f"tokens, found {tokens} in {stream.remote or stream.local!r}; lower block_size, or leave "
                "the stream out"
            )


__all__ = [
    "DOCUMENT_FIELDS",
    "BlockDtype",
    "StreamingTokenBlockDataset",
    "check_block_dtype",
    "check_block_size",
]
