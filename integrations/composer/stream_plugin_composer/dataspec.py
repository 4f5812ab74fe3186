"""Composer ``DataSpec``s around our ``StreamingDataLoader``.

Composer must see the ``StreamingDataLoader`` itself (not a plain ``DataLoader`` over the dataset): the
loader tells the dataset where each epoch starts and ends, and its ``__len__`` (batches per epoch per
rank) is what makes durations in epochs (``'2ep'``) work. The dataset implements Composer's state
protocol (``state_dict(num_samples, from_beginning)`` / ``load_state_dict``); add
``ExactDataResumption`` to the callbacks so that every save interval resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from composer.core import DataSpec
from composer.utils import dist

from stream_plugin import ConfigError, StreamingDataLoader, StreamingDataset
from stream_plugin.preemption import WorkerSignalGuard
from stream_plugin.text import StreamingTextDataset, StreamingTokenBlockDataset, collate_token_blocks
from stream_plugin_composer.batches import num_samples_in_batch
from stream_plugin_composer.config import dataset_arguments, device_batch_size_of, resolve_callable
from stream_plugin_composer.layout import shared_replication, tensor_parallel_degree
from stream_plugin_composer.text_loader import (
    PLAIN_LOADER_DEFAULTS,
    TEXT_KEYS,
    TEXT_LOADER_DEFAULTS,
    is_text_section,
    num_tokens_in_batch,
    text_parts,
)
from stream_plugin_composer.token_blocks import (
    TOKEN_BLOCKS_KEY,
    blocks_in_batch,
    input_tokens_in_batch,
    plain_block_options,
    pop_token_blocks,
    refuse_masking,
    text_block_options,
)


def streaming_dataspec(
    loader: StreamingDataLoader,
    *,
    get_num_samples_in_batch: Callable[[Any], int] | None = None,
    get_num_tokens_in_batch: Callable[[Any], Any] | None = None,
) -> DataSpec:
    """Wrap ``loader`` for ``Trainer(train_dataloader=...)``, after checking it can resume exactly."""
    if not isinstance(loader, StreamingDataLoader) or not isinstance(loader.dataset, StreamingDataset):
        found = type(loader).__name__
        if isinstance(loader, StreamingDataLoader):
            found = f"StreamingDataLoader over {type(loader.dataset).__name__}"
        raise ConfigError(
            f"streaming_dataspec: expected a StreamingDataLoader over a StreamingDataset, found {found}; "
            "wrap the dataset in StreamingDataLoader (a plain DataLoader hides epoch starts and ends from "
            "the dataset, so its checkpoints could not resume exactly)"
        )
    dataset = loader.dataset
    composer_world = dist.get_world_size()
    if dataset.world.world_size != composer_world:
        raise ConfigError(
            f"streaming_dataspec: expected the dataset to see Composer's world size {composer_world}, found "
            f"{dataset.world.world_size}; build the dataset inside the launched processes (composer -n N "
            "sets RANK and WORLD_SIZE) or after torch.distributed is initialised"
        )
    return DataSpec(
        loader,
        get_num_samples_in_batch=get_num_samples_in_batch or num_samples_in_batch,
        get_num_tokens_in_batch=get_num_tokens_in_batch,
    )


def build_streaming_dataspec(
    *,
    device_batch_size: int | float,
    dataset: Mapping[str, Any],
    tokenizer: Any = None,
    name: str | None = None,
    num_workers: int = 0,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    timeout: float = 0,
    drop_last: bool = False,
    collate_fn: str | Callable[..., Any] | None = None,
    parallelism_config: Any = None,
) -> DataSpec:
    """The llm-foundry ``train_loader`` / ``eval_loader`` builder (registered as ``stream_plugin``).

    llm-foundry calls it as ``fn(tokenizer=..., device_batch_size=..., **other loader keys)``.
    ``dataset`` holds ``StreamingDataset`` arguments; ``streams`` may be a mapping of name to
    ``Stream`` arguments. Without llm-foundry's text keys samples are yielded as stored and
    ``tokenizer`` is unused. With them (``max_seq_len``, ``eos_token_id``, ...: see ``text_loader``) the
    section means what it means to llm-foundry's ``text`` loader: ``StreamingTextDataset`` samples,
    collated by ``TextCollator``, and llm-foundry's defaults for ``pin_memory``, ``persistent_workers``
    (True) and ``prefetch_factor`` (2); otherwise those default to False, False and torch's.
    ``dataset.token_blocks`` reads token blocks (``StreamingTokenBlockDataset``, pre-training) instead:
    ``true`` beside the text keys (blocks of ``max_seq_len`` tokens, llm-foundry's batches), or a
    mapping of the block dataset's options without them (see ``token_blocks``).
    ``name`` (the registry key, passed by older llm-foundry versions) is ignored. ``collate_fn`` may be
    a ``"package.module:function"`` string.

    Tensor and sequence parallel ranks share batches (docs/parallelism.md): ``parallelism_config`` (the
    Trainer's) with ``tp`` makes each ``tensor_parallel_degree`` consecutive ranks one replica set, as
    Composer's mesh does; ``dataset.seq_parallel_replication: k`` makes k consecutive ranks share every
    sample, and a rank's batch then holds ``device_batch_size x k`` samples (``device_batch_size`` may
    be a fraction). ``replication`` in the dataset section, if given, must agree.
    """
    del name  # accepted for llm-foundry's calling convention
    arguments, reader = _reader_for(dataset, tokenizer)
    collate = resolve_callable(collate_fn, name="train_loader.collate_fn") or reader.collate_fn
    replication = shared_replication(
        arguments.pop("replication", None), tensor_parallel_degree(parallelism_config), "parallelism_config.tp"
    )
    replication = shared_replication(replication, reader.seq_parallel, "seq_parallel_replication")
    batch_size = device_batch_size_of(device_batch_size * reader.seq_parallel)
    streaming = reader.dataset_class(**arguments, **reader.options, replication=replication, batch_size=batch_size)
    defaults = TEXT_LOADER_DEFAULTS if reader.text else PLAIN_LOADER_DEFAULTS
    loader_options: dict[str, Any] = {}
    if num_workers:
        # Only valid with workers; DataLoader rejects them otherwise.
        loader_options.update(
            prefetch_factor=defaults["prefetch_factor"] if prefetch_factor is None else prefetch_factor,
            persistent_workers=defaults["persistent_workers"] if persistent_workers is None else persistent_workers,
            # A preemption signal sent to the whole process group must not kill the workers mid-batch:
            # the main process finishes the batch, checkpoints, and shuts them down itself.
            worker_init_fn=WorkerSignalGuard(),
        )
    loader = StreamingDataLoader(
        streaming,
        batch_size=batch_size,
        num_workers=num_workers,
        pin_memory=defaults["pin_memory"] if pin_memory is None else pin_memory,
        timeout=timeout,
        drop_last=drop_last,
        collate_fn=collate,
        check_layout=True,  # replicas' settings; ExactDataResumption checks against the Trainer's mesh too
        **loader_options,
    )
    return streaming_dataspec(
        loader,
        get_num_samples_in_batch=reader.get_num_samples_in_batch,
        get_num_tokens_in_batch=reader.get_num_tokens_in_batch,
    )


@dataclass(frozen=True)
class _Reader:
    """What a ``dataset`` section reads with: the dataset class and its own options, the collate, the
    batch counts, and the ranks that share each sample (``seq_parallel_replication``)."""

    dataset_class: type[StreamingDataset]
    options: dict[str, Any] = field(default_factory=dict)
    collate_fn: Callable[..., Any] | None = None
    text: bool = False  # llm-foundry's text loader semantics (and loader defaults)
    seq_parallel: int = 1
    get_num_samples_in_batch: Callable[[Any], int] | None = None
    get_num_tokens_in_batch: Callable[[Any], Any] | None = None


def _reader_for(dataset: Mapping[str, Any], tokenizer: Any) -> tuple[dict[str, Any], _Reader]:
    """The ``StreamingDataset`` arguments of a ``dataset`` section, and what reads it: samples as stored,
    llm-foundry's text samples, or token blocks (``token_blocks``, with or without the text keys)."""
    text = is_text_section(dataset)
    arguments = dataset_arguments(dataset, (*TEXT_KEYS, TOKEN_BLOCKS_KEY) if text else (TOKEN_BLOCKS_KEY,))
    blocks_setting = pop_token_blocks(arguments)
    refuse_masking(blocks_setting, arguments)
    if not text:
        if blocks_setting is None:
            return arguments, _Reader(StreamingDataset)
        return arguments, _Reader(
            StreamingTokenBlockDataset,
            plain_block_options(blocks_setting),
            collate_token_blocks,
            get_num_samples_in_batch=blocks_in_batch,
            get_num_tokens_in_batch=input_tokens_in_batch,
        )
    parts = text_parts(arguments, tokenizer)
    if blocks_setting is None:
        dataset_class: type[StreamingDataset] = StreamingTextDataset
        options = parts.dataset_options
    else:
        dataset_class, options = StreamingTokenBlockDataset, text_block_options(blocks_setting, parts.dataset_options)
    reader = _Reader(
        dataset_class,
        options,
        parts.collate_fn,
        text=True,
        seq_parallel=parts.seq_parallel_replication,
        get_num_tokens_in_batch=num_tokens_in_batch,
    )
    return arguments, reader
