"""``StreamingDataLoader``: a ``DataLoader`` that knows how far the caller has read.

It counts batches handed to the caller, not batches its workers prefetched, so ``state_dict()`` is the
exact position of training. The state is the dataset's resume state: a flat dict of ints and strs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import DataLoader, get_worker_info

from stream_plugin.collectives import distributed
from stream_plugin.errors import ConfigError
from stream_plugin.reading.cursor import IterationPlan, persistent_worker_plan
from stream_plugin.reading.dataset import StreamingDataset
from stream_plugin.reading.heap import settle_heap
from stream_plugin.reading.layout_check import batch_digest, check_layout
from stream_plugin.reading.passes import LoaderPass
from stream_plugin.reading.torch_internals import make_iterator, stop_workers
from stream_plugin.reading.torch_internals.collate import collate_with_tensor_fn, stack_in_new_segment
from stream_plugin.reading.transport import REGION_TENSOR_MAX_BYTES, PackedCollate, stack_in_region


def collate_zero_copy(batch: list[Any]) -> Any:
    """``default_collate`` without its warning about read-only arrays, and with large tensors stacked
    where the trip to the main process costs least.

    ``ndarray`` columns are zero-copy, read-only views of the shard; collate copies them when it
    stacks the batch, so the warning PyTorch prints once per process is noise. In a worker, each batch
    of tensors (a column, or the whole batch of token blocks) is stacked:

    - above ``REGION_TENSOR_MAX_BYTES``, into the batch's slot of the iterator's shared region where
      the worker has one (``transport.stack_in_region``): the caller gets a view of it, no copy;
      ``default_collate`` would stack it into a new shared-memory segment, whose fresh pages cost more
      than the copy itself. Without a free slot, into that segment (handed over without another copy);
    - up to that size, into ordinary memory: ``PackedCollate`` copies it into its region, or inside the
      pickle.
    """
    first = batch[0]
    if type(first) is torch.Tensor:
        return _collate_tensors(batch)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="The given NumPy array is not writable", category=UserWarning
        )
        return collate_with_tensor_fn(batch, _collate_tensors)


def _collate_tensors(batch: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """A batch of tensors stacked as ``collate_zero_copy`` says."""
    if get_worker_info() is None:
        return torch.stack(batch)
    stacked = stack_in_region(batch)
    if stacked is not None:
        return stacked
    first = batch[0]
    if first.numel() * first.element_size() * len(batch) <= REGION_TENSOR_MAX_BYTES:
        return torch.stack(batch)
    return stack_in_new_segment(batch)


@dataclass(frozen=True)
class LoaderPosition:
    """Where the caller stands in the loader's current pass (a read-only snapshot)."""

    epoch: int
    start: int  # global samples of the epoch consumed before this pass began (a resume point, else 0)
    batches: int  # batches handed to the caller in this pass
    sample_in_epoch: int  # global samples of the epoch the caller has received: start + batches' samples
    epoch_batch_size: int  # the global batch size the epoch's order was built with


@dataclass(frozen=True)
class _PersistentWorkers:
    """What live persistent workers were started with: enough to predict the plan of their next pass."""

    first_plan: IterationPlan
    global_batch_size: int
    replays: bool  # they repeat first_plan at every pass instead of advancing one epoch


class StreamingDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` with ``state_dict()`` / ``load_state_dict()`` for exact resumption.

    Takes the same arguments as ``DataLoader``. It binds its ``batch_size`` and ``drop_last`` to the
    dataset (``StreamingDataset.bind_loader``, once): its ``batch_size`` fills in the dataset's when the
    dataset was built without one; if both are set they must agree, since workers build whole batches.
    ``drop_last=True`` drops the partial last global batch of every epoch on every rank, so no rank
    yields a short batch. Without it, every sample of the
    epoch is yielded once; on D data-parallel ranks the last batch of each rank may end with one repeat
    (fewer than D in all) so that every rank yields the same number of batches, and
    ``real_samples(batch_idx)`` says how many samples of a batch come before such repeats.
    ``collate_fn`` is wrapped in a ``PackedCollate`` (the original is its ``collate``), which makes the
    trip from workers to the main process cheaper (``stream_plugin.reading.transport``).

    With workers, each pass's iterator comes from ``reading.torch_internals.make_iterator``: on a torch
    this project checked, one that hands batches over faster through torch's private internals.
    ``torch_iterator=True`` (or the environment variable ``STREAM_PLUGIN_TORCH_ITERATOR=1``) keeps
    torch's own iterator instead, as does any other torch (logged once).

    ``check_layout``: at the first batch, the ranks of a ``torch.distributed`` job compare a digest of
    their first batch's sample ids in one collective (``reading.layout_check``), so a wrong layout fails
    at once rather than after hours of training on mismatched batches. ``True`` checks against the
    dataset's own layout (settings that differ between replicas); a sequence gives the data-parallel
    coordinate of every global rank as the training framework sees it (``mesh_coordinates(mesh["dp"])``),
    which also catches a wrong ``replication``. Every rank must then iterate the loader: the Lightning and
    Composer integrations turn it on for their loaders.

    Hugging Face Accelerate: ``accelerator.prepare(loader)`` returns this loader itself. It is split by
    rank already; Accelerate's own wrappers would split or dispatch it a second time (each rank would
    train 1/D of its share, or rank 0's share would be sent to every rank). Its batches stay where the
    loader puts them: move them with ``accelerate.utils.send_to_device(batch, accelerator.device)``.
    ``accelerator.save_state()`` / ``load_state()`` save and restore its ``state_dict()`` (the files
    ``dl_state_dict*.bin``), also on another number of processes.
    """

    # Read by accelerate (checked with 1.15): a loader marked prepared is returned as it is, and one that
    # says it is stateful has its state_dict saved and loaded by save_state / load_state.
    _is_accelerate_prepared = True
    use_stateful_dataloader = True

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        *,
        torch_iterator: bool = False,
        check_layout: bool | Sequence[int] = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(dataset, StreamingDataset):
            if kwargs.get("num_workers") and batch_size is None and dataset.batch_size is None:
                raise ConfigError(
                    "StreamingDataLoader: expected a batch_size on the loader or the dataset when num_workers > 0, "
                    "found None for both; workers build whole batches of the global order, so pass the per-device "
                    "batch_size"
                )
            dataset.bind_loader(batch_size=batch_size, drop_last=bool(kwargs.get("drop_last", False)))
        if kwargs.get("collate_fn") is None and batch_size is not None:
            kwargs["collate_fn"] = collate_zero_copy
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        self.torch_iterator = torch_iterator  # an attribute: Lightning re-creates loaders from them
        self.check_layout = check_layout
        self._layout_checked = False
        if not isinstance(self.collate_fn, PackedCollate):  # Lightning re-creates loaders from attributes
            self.collate_fn = PackedCollate(self.collate_fn)
        if isinstance(dataset, StreamingDataset):
            dataset.check_cache_limit(self.num_workers)
        self._pass: LoaderPass | None = None
        self._batches_yielded = 0
        # Persistent workers plan their later passes on their own; remember how they started.
        self._workers: _PersistentWorkers | None = None
        self._worker_passes = 0

    def _pass_iterator(self) -> Any:
        """The iterator of a pass (``torch_internals.make_iterator``), with this process's heap settled for
        the batches it receives from workers (``heap.settle_heap``: as if it read them itself)."""
        iterator = make_iterator(self)
        if self.num_workers:
            settle_heap(in_worker=False)  # after the workers started: they settle their own
        return iterator

    @property
    def _streaming(self) -> StreamingDataset | None:
        return self.dataset if isinstance(self.dataset, StreamingDataset) else None

    def _restart_workers(self) -> None:
        stop_workers(self)
        self._workers = None
        self._worker_passes = 0

    def _workers_would_follow(self, plan: IterationPlan, global_batch_size: int) -> bool:
        workers = self._workers
        if workers is None or workers.global_batch_size != global_batch_size:
            return False
        next_plan = persistent_worker_plan(
            workers.first_plan,
            self._worker_passes,
            replays=workers.replays,
            global_batch_size=workers.global_batch_size,
        )
        return next_plan == plan

    def workers_should_replay(self, plan: IterationPlan) -> bool:
        """Whether persistent workers started for ``plan`` should repeat it at every pass (a hook).

        By default, yes when this pass repeats the first pass of the workers it replaces: the caller
        rewinds to the same epoch before every pass (``set_epoch``), as evaluation does. A wrong guess
        costs a restart, never data: workers are kept only while the pass they would run next is the one
        planned here. A loader that rewinds before every pass by design (an evaluation loader) returns
        True, so its workers are started once.
        """
        return self._workers is not None and self._workers.first_plan == plan

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset = self._streaming
        if dataset is None:
            yield from self._pass_iterator()
            return
        current = dataset.begin_pass()
        plan = current.plan
        replay = False
        if self.num_workers and self.persistent_workers:
            if not self._workers_would_follow(plan, dataset.global_batch_size):
                replay = self.workers_should_replay(plan)
                self._restart_workers()
                self._workers = _PersistentWorkers(plan, dataset.global_batch_size, replay)
            self._worker_passes += 1
        self._pass = current
        self._batches_yielded = 0
        if current.batches == 0:  # resumed at the very end of an epoch: this pass only closes it
            dataset.finish_pass(plan)
        if current.batches and self.check_layout is not False and not self._layout_checked:
            self._check_layout(dataset, current)
        with dataset.handing_over(plan, replay=replay):
            batches = self._pass_iterator()  # starts the workers, or this process's reader
        for batch in batches:
            self._batches_yielded += 1
            if self._batches_yielded == current.batches:
                # Before handing out the last batch: callers such as Composer read a pass with
                # islice(loader, len(loader)) and never come back for the end of the iterator.
                dataset.finish_pass(plan)
            yield batch
        self._pass = None

    def _check_layout(self, dataset: StreamingDataset, current: LoaderPass) -> None:
        """The first-batch check (``layout_check``), once per loader, where several ranks run."""
        self._layout_checked = True
        if not distributed() or dataset.world.world_size == 1:
            return
        topology = replace(dataset.topology(), workers_per_rank=0, worker=0)  # the rank's batches, in order
        digest = batch_digest(dataset.sample_id_pieces(current.plan, topology), current.device_batch_size)
        expected = None if self.check_layout is True else list(self.check_layout)  # type: ignore[arg-type]
        check_layout(digest, dataset.data_parallel, dataset.world.rank, expected)

    @property
    def position(self) -> LoaderPosition | None:
        """The caller's position in the pass in progress, or None between passes.

        A pass abandoned mid-way (a ``break``) stays in progress until the next ``iter()`` or
        ``load_state_dict()``, as it does for ``state_dict()``.
        """
        current = self._pass
        if current is None:
            return None
        plan = current.plan
        return LoaderPosition(
            epoch=plan.epoch,
            start=plan.start,
            batches=self._batches_yielded,
            sample_in_epoch=current.sample_in_epoch(self._batches_yielded),
            epoch_batch_size=plan.epoch_batch_size,
        )

    def real_samples(self, batch_idx: int) -> int:
        """How many leading samples of batch ``batch_idx`` (counted from 0 in the current pass) to count:
        those that are not rank-balance repeats (the batch size, except in a rank's short last batch of
        an epoch), and 0 on a replica other than the first of its set (ranks that share a data-parallel
        coordinate, as tensor parallel ranks do, read the same batch; it is counted on one of them).

        For exact evaluation on several ranks, update metrics with the first ``real_samples(batch_idx)``
        samples of each batch: ``metric.update(preds[:n], target[:n])``; a metric synced over the world
        then counts every sample once.
        """
        return self._batch_counts(batch_idx)[1]

    def repeats_in(self, batch_idx: int) -> int:
        """How many trailing samples of batch ``batch_idx`` of the current pass not to count: those that
        repeat an earlier one so that every rank yields the same number of batches (0 but in a rank's
        short last batch), and the whole batch on a replica other than the first of its set."""
        size, real = self._batch_counts(batch_idx)
        return size - real

    def _batch_counts(self, batch_idx: int) -> tuple[int, int]:
        current = self._pass
        if current is None:
            raise ConfigError(
                "StreamingDataLoader.real_samples / repeats_in: expected a pass in progress over a StreamingDataset, "
                f"found {'none' if self._streaming is not None else type(self.dataset).__name__}; call it while "
                "iterating (e.g. in validation_step)"
            )
        return current.batch_counts(batch_idx)

    def samples_consumed(self) -> int:
        """Global samples of the current epoch that the caller has received (resume point included)."""
        position = self.position
        return position.sample_in_epoch if position is not None else 0

    @property
    def num_samples_yielded(self) -> int:
        """MosaicML's counter: samples of the current epoch this rank's share of the global position
        stands for (``samples_consumed()`` over the data-parallel ranks)."""
        dataset = self._streaming
        size = dataset.data_parallel_size if dataset is not None else 1
        return self.samples_consumed() // size

    def state_dict(self) -> dict[str, int | str]:
        """The exact position of the caller in the global order (rank-independent)."""
        dataset = self._streaming
        if dataset is None:
            raise ConfigError(
                f"StreamingDataLoader.state_dict: expected a StreamingDataset, found "
                f"{type(self.dataset).__name__}; only StreamingDataset positions can be saved"
            )
        return dataset.state_dict(self.samples_consumed(), from_beginning=True)

    def load_state_dict(self, obj: dict[str, Any] | None, *, strict: bool = True) -> None:
        """Continue from the state ``obj`` at the next ``iter()``; live persistent workers are restarted.
        (``obj``: MosaicML's argument name.)"""
        dataset = self._streaming
        if dataset is None:
            raise ConfigError(
                f"StreamingDataLoader.load_state_dict: expected a StreamingDataset, found "
                f"{type(self.dataset).__name__}"
            )
        dataset.load_state_dict(obj, strict=strict)
        self._pass = None
        self._batches_yielded = 0
        self._restart_workers()
