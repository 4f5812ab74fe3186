"""Refuse a loader that splits our samples over the ranks a second time.

A ``StreamingDataset`` already gives each rank its own share of every global batch. Hugging Face
Accelerate (under the ``transformers.Trainer``, or ``accelerator.prepare(DataLoader(dataset))``)
wraps an ``IterableDataset`` to split it again: ``DataLoaderDispatcher`` reads it on rank 0 alone and
slices rank 0's share between the ranks, ``IterableDatasetShard`` keeps a 1/D slice of each rank's
share. Either trains on a fraction of the data, silently. Both call the dataset's ``set_epoch`` from
their own method before each pass, on every rank: the one place they can be seen without touching
their classes.
"""

from __future__ import annotations

from types import FrameType

from stream_plugin.errors import ConfigError

# (module, class) of the wrappers that split or dispatch an IterableDataset a second time.
_SECOND_SPLITTERS = frozenset(
    {
        ("accelerate.data_loader", "DataLoaderDispatcher"),
        ("accelerate.data_loader", "IterableDatasetShard"),
    }
)


def second_splitter(frame: FrameType | None) -> str | None:
    """The name of the wrapper whose method runs in ``frame`` (a caller of ``set_epoch``), when it is
    one that splits the samples again; None otherwise."""
    owner = frame.f_locals.get("self") if frame is not None else None
    kind = type(owner)
    return kind.__name__ if (kind.__module__, kind.__name__) in _SECOND_SPLITTERS else None


def refuse_second_split(frame: FrameType | None, world_size: int) -> None:
    """A ConfigError when, on several ranks, ``frame`` belongs to a wrapper that splits our samples again."""
    splitter = second_splitter(frame) if world_size > 1 else None
    if splitter is None:
        return
    raise ConfigError(
        f"StreamingDataset: expected to be read through a StreamingDataLoader on every rank (it already gives "
        f"each of the {world_size} ranks its own share), found Accelerate's {splitter} reading it, which splits "
        "or dispatches the samples a second time and trains on a fraction of them. With the Hugging Face "
        "Trainer use stream_plugin_transformers.StreamingTrainer; with Accelerate pass a StreamingDataLoader "
        "to accelerator.prepare (it is kept as it is)"
    )


__all__ = ["refuse_second_split", "second_splitter"]
