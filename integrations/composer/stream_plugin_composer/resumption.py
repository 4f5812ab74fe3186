"""``ExactDataResumption``: the data position taken from Composer's own clock, so every resume is exact.

Composer saves ``dataset.state_dict(timestamp.sample_in_epoch)`` but never says which epoch it is in,
and the dataset cannot always tell: Composer reads ``len(loader)`` batches through ``islice`` and never
resumes the loader's generator after the last one, so the dataset does not see the epoch end. An
epoch-interval save (``'1ep'``, taken after Composer moved to the next epoch with ``sample_in_epoch ==
0``) would then point back at the finished epoch and replay it; a save on an epoch's last batch would
point at the next epoch while Composer still counts the old one, and the two clocks drift apart.

This callback stores the position as Composer counts it: ``(timestamp.epoch,
timestamp.sample_in_epoch)``, plus the global batch size the epoch started with and the dataset's
fingerprint. Composer loads callbacks before the dataset, so the callback keeps the state and applies
it at ``FIT_START``, after every path that loads the dataset state and before the first batch. At
every ``EPOCH_START`` it also points the dataset at the start of Composer's epoch, so the two clocks
cannot drift apart, whatever else iterated the loader.
"""

from __future__ import annotations

import warnings
from typing import Any

from composer.core import Callback, State
from composer.loggers import Logger

from stream_plugin import (
    ConfigError,
    ResumeState,
    StateError,
    StreamingDataLoader,
    StreamingDataset,
    resume_state_at,
)
from stream_plugin.redaction import get_logger
from stream_plugin_composer.layout import data_parallel_check

log = get_logger(__name__)

CALLBACK_STATE_VERSION = 1


def streaming_dataset_of(state: State) -> StreamingDataset:
    """The train ``StreamingDataset`` behind ``state.train_dataloader``, or a ConfigError that says why not."""
    loader = state.train_dataloader
    dataset = getattr(loader, "dataset", None)
    if not isinstance(dataset, StreamingDataset):
        raise ConfigError(
            f"ExactDataResumption: expected the train dataloader to read a StreamingDataset, found "
            f"{type(loader).__name__} over {type(dataset).__name__}; build it with "
            "stream_plugin_composer.build_streaming_dataspec or streaming_dataspec, or remove the callback"
        )
    return dataset


def distinct_samples(counted: int, dataset: StreamingDataset) -> int:
    """Composer's sample count, which sums every rank's batch, in distinct samples: the replicas of a
    data-parallel coordinate (tensor or sequence parallel ranks) each count the same batch."""
    return counted // dataset.data_parallel.replication


class ExactDataResumption(Callback):
    """Saves the train data position from Composer's counters and restores it before the first batch.

    Registered for llm-foundry YAML as ``callbacks: {stream_plugin_resume: {}}``.
    """

    def __init__(self) -> None:
        self._state: State | None = None
        # The global batch size the current epoch's order was built with (kept across resumes, so a
        # run that changes its world size mid-epoch finishes the epoch without gaps or repeats).
        self._epoch_batch_size: int | None = None
        self._restored: ResumeState | None = None

    # ------------------------------------------------------------------ events
    def init(self, state: State, logger: Logger) -> None:
        del logger
        self._state = state

    def fit_start(self, state: State, logger: Logger) -> None:
        del logger
        self._state = state
        dataset = streaming_dataset_of(state)
        # Before any batch: under tensor parallelism, the dataset's data-parallel layout is the mesh's.
        data_parallel_check(state.train_dataloader, state.device_mesh)
        restored, self._restored = self._restored, None
        if restored is None:
            return
        self._warn_if_clocks_differ(restored, state)
        loader = state.train_dataloader
        if isinstance(loader, StreamingDataLoader):
            loader.load_state_dict(restored.to_dict())  # also restarts persistent workers
        else:
            dataset.load_state_dict(restored.to_dict())
        self._epoch_batch_size = restored.epoch_batch_size
        # The dataset resumes by itself: Composer must neither spin the loader nor skip batches.
        state.dataset_resumption["train"] = True
        log.info(
            "ExactDataResumption: resuming the data at epoch %d, sample %d",
            restored.epoch,
            restored.sample_in_epoch,
        )

    def epoch_start(self, state: State, logger: Logger) -> None:
        del logger
        dataset = streaming_dataset_of(state)
        self._epoch_batch_size = dataset.global_batch_size
        # Composer's epoch E starts here, so the dataset's next pass is epoch E from its first sample,
        # whatever iterated the loader before (a batch peeked at before fit, a pass cut short by
        # hand): otherwise every later epoch would be shifted. In the usual case this is exactly the
        # pass the dataset would start anyway, and persistent workers are kept.
        dataset.load_state_dict(self.current_state(state).to_dict())

    # ------------------------------------------------------------------ state
    def current_state(self, state: State) -> ResumeState:
        """The data position at ``state.timestamp``, as the next run must resume it."""
        dataset = streaming_dataset_of(state)
        sample_in_epoch = distinct_samples(int(state.timestamp.sample_in_epoch), dataset)
        # Mid-epoch, the global batch size the epoch began with (kept across resumes); at its start, today's.
        epoch_batch_size = self._epoch_batch_size if sample_in_epoch else None
        return resume_state_at(
            dataset,
            int(state.timestamp.epoch),
            sample_in_epoch,
            epoch_batch_size=epoch_batch_size,
        )

    def state_dict(self) -> dict[str, Any]:
        if self._state is None or self._state.train_dataloader is None:
            return {"version": CALLBACK_STATE_VERSION, "resume_state": None}
        return {"version": CALLBACK_STATE_VERSION, "resume_state": self.current_state(self._state).to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version = state.get("version")
        if version != CALLBACK_STATE_VERSION:
            raise StateError(
                f"ExactDataResumption: expected callback state version {CALLBACK_STATE_VERSION}, found "
                f"{version!r}; the checkpoint was written by an incompatible stream_plugin_composer"
            )
        saved = state.get("resume_state")
        self._restored = None if saved is None else ResumeState.from_dict(saved)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _warn_if_clocks_differ(restored: ResumeState, state: State) -> None:
        dataset = streaming_dataset_of(state)
        clock = (int(state.timestamp.epoch), distinct_samples(int(state.timestamp.sample_in_epoch), dataset))
        if clock != (restored.epoch, restored.sample_in_epoch):
            warnings.warn(
                f"ExactDataResumption: the data resumes at epoch {restored.epoch}, sample "
                f"{restored.sample_in_epoch} (the checkpoint's), but the trainer's clock says epoch "
                f"{clock[0]}, sample {clock[1]}; was the timestamp excluded from loading "
                "(load_ignore_keys) or reset?",
                stacklevel=2,
            )
