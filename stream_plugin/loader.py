"""``StreamingDataLoader``: a ``DataLoader`` that knows how far the caller has read.

It counts batches handed to the caller, not batches its workers prefetched, so ``state_dict()`` is the
exact position of training. The state is the dataset's resume state: a flat dict of ints and strs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, default_collate

from stream_plugin.cursor import IterationPlan
from stream_plugin.dataset import StreamingDataset
from stream_plugin.errors import ConfigError
from stream_plugin.transport import PackedCollate


def collate_zero_copy(batch: list[Any]) -> Any:
    """``default_collate`` without its warning about read-only arrays.

    ``ndarray`` columns are zero-copy, read-only views of the shard; collate copies them when it
    stacks the batch, so the warning PyTorch prints once per process is noise.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="The given NumPy array is not writable", category=UserWarning
        )
        return default_collate(batch)


class StreamingDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` with ``state_dict()`` / ``load_state_dict()`` for exact resumption.

    Takes the same arguments as ``DataLoader``. The dataset's ``batch_size`` is set from the loader's
    when the dataset left it unset; if both are set they must agree, since workers build whole batches.
    ``collate_fn`` is wrapped in a ``PackedCollate`` (the original is its ``collate``), which makes the
    trip from workers to the main process cheaper (``stream_plugin.transport``).
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, **kwargs: Any) -> None:
        if isinstance(dataset, StreamingDataset):
            if dataset.batch_size is None:
                dataset.batch_size = batch_size
            elif batch_size is not None and dataset.batch_size != batch_size:
                raise ConfigError(
                    f"StreamingDataLoader: expected batch_size={dataset.batch_size} as the dataset's "
                    f"per-device batch_size, found {batch_size}; pass the same value to both (or leave the "
                    "dataset's unset)"
                )
        if kwargs.get("collate_fn") is None and batch_size is not None:
            kwargs["collate_fn"] = collate_zero_copy
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        if not isinstance(self.collate_fn, PackedCollate):  # Lightning re-creates loaders from attributes
            self.collate_fn = PackedCollate(self.collate_fn)
        if isinstance(dataset, StreamingDataset):
            dataset.check_cache_limit(self.num_workers)
        self._plan: IterationPlan | None = None
        self._batches_yielded = 0
        # Persistent workers advance one epoch per pass on their own; remember where they started.
        self._workers_first_plan: IterationPlan | None = None
        self._worker_passes = 0

    @property
    def _streaming(self) -> StreamingDataset | None:
        return self.dataset if isinstance(self.dataset, StreamingDataset) else None

    def _restart_workers(self) -> None:
        iterator = getattr(self, "_iterator", None)
        if iterator is not None:
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self._iterator = None
        self._workers_first_plan = None
        self._worker_passes = 0

    def _workers_would_follow(self, plan: IterationPlan, global_batch_size: int) -> bool:
        first = self._workers_first_plan
        return (
            first is not None
            and plan.start == 0
            and plan.epoch == first.epoch + self._worker_passes
            and plan.epoch_batch_size == global_batch_size
            and plan.num_canonical_nodes == first.num_canonical_nodes
        )

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset = self._streaming
        if dataset is None:
            yield from super().__iter__()
            return
        plan = dataset._begin_iteration()
        dataset._cursor.loader_plan = plan  # read by the main process, or pickled to new workers
        if self.num_workers and self.persistent_workers:
            if not self._workers_would_follow(plan, dataset.global_batch_size):
                self._restart_workers()
                self._workers_first_plan = plan
            self._worker_passes += 1
        self._plan = plan
        self._batches_yielded = 0
        pass_batches = dataset._batches_in_pass(plan)
        if pass_batches == 0:  # resumed at the very end of an epoch: this pass only closes it
            dataset._end_iteration(plan)
        batches = super().__iter__()
        if self.num_workers:
            dataset._cursor.loader_plan = None  # the workers now hold their copies
        for batch in batches:
            self._batches_yielded += 1
            if self._batches_yielded == pass_batches:
                # Before handing out the last batch: callers such as Composer read a pass with
                # islice(loader, len(loader)) and never come back for the end of the iterator.
                dataset._end_iteration(plan)
            yield batch
        self._plan = None

    def samples_consumed(self) -> int:
        """Global samples of the current epoch that the caller has received (resume point included)."""
        dataset = self._streaming
        if dataset is None or self._plan is None:
            return 0
        return self._plan.start + self._batches_yielded * dataset.global_batch_size

    def state_dict(self) -> dict[str, int | str]:
        """The exact position of the caller in the global order (rank-independent)."""
        dataset = self._streaming
        if dataset is None:
            raise ConfigError(
                f"StreamingDataLoader.state_dict: expected a StreamingDataset, found "
                f"{type(self.dataset).__name__}; only StreamingDataset positions can be saved"
            )
        return dataset.state_dict(self.samples_consumed(), from_beginning=True)

    def load_state_dict(self, state: dict[str, Any] | None, *, strict: bool = True) -> None:
        """Continue from ``state`` at the next ``iter()``; live persistent workers are restarted."""
        dataset = self._streaming
        if dataset is None:
            raise ConfigError(
                f"StreamingDataLoader.load_state_dict: expected a StreamingDataset, found "
                f"{type(self.dataset).__name__}"
            )
        dataset.load_state_dict(state, strict=strict)
        self._plan = None
        self._batches_yielded = 0
        self._restart_workers()
