"""``StreamingDataModule``: streaming datasets for every stage, with the training position in checkpoints.

Lightning saves ``datamodule.state_dict()`` in every checkpoint it writes (under the class's qualified
name) and calls ``load_state_dict`` when ``fit(ckpt_path=...)`` restores one, after ``setup`` and before
the optimizers are configured. We rely on that path: it runs even when ``configure_optimizers`` calls
``trainer.estimated_stepping_batches``, where Lightning skips its own restore of stateful loaders
(Lightning issue 20550). The train loader reports the same state to that bookkeeping, so when Lightning
does restore the loader too, both restores agree.

The state is computed from Lightning's progress counters (see ``progress``), is the same on every rank,
and is checked against the loader at the first batch of every training epoch.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn

from stream_plugin import EvalLoader, StreamingDataset, World, detect_world, mesh_coordinates
from stream_plugin.errors import ConfigError, StateError, check_int
from stream_plugin.preemption import WorkerSignalGuard
from stream_plugin_lightning.batch_sizes import BatchSizes, resolve_batch_sizes
from stream_plugin_lightning.loaders import TrainLoader
from stream_plugin_lightning.mesh import DataParallelMesh, data_parallel_mesh
from stream_plugin_lightning.progress import TrainPosition, batches_per_epoch, state_at, train_position
from stream_plugin_lightning.specs import DatasetSpec, as_dataset_spec

Split = Literal["train", "val", "test", "predict"]
_SPLITS_FOR_STAGE: dict[str, tuple[Split, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("predict",),
}
# Lightning warns that an IterableDataset's __len__ may count samples twice over workers; ours is the
# exact number of batches every rank yields (workers split the batches, see the order contract in docs/order.md).
_LEN_WARNING = "Your `IterableDataset` has `__len__` defined"


def _no_loader_hook(base_hook: Callable[..., Any]) -> Callable[[], list[Any]]:
    """The loader hook of a split that has no data: returns [], and wraps (so "is") the base hook."""

    @functools.wraps(base_hook)
    def no_loader() -> list[Any]:
        return []

    return no_loader


class _EvalLoaderHook:
    """``val_dataloader`` and co.: the split's loader, or, while the split has no data, a hook that
    Lightning reads as not overridden, so it skips the stage without warning "Total length ... is
    zero" (which an overridden hook returning [] causes). Lightning unwraps ``__wrapped__`` to tell."""

    def __init__(self, split: Split) -> None:
        self.split = split

    def __get__(self, instance: StreamingDataModule | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if instance.specs[self.split] is None:
            return _no_loader_hook(getattr(pl.LightningDataModule, f"{self.split}_dataloader"))
        return functools.partial(instance._eval_loader, self.split)


def _skip_lightnings_length_warning() -> None:
    """Ignore Lightning's generic ``IterableDataset`` length warning, which does not apply to our loaders."""
    warnings.filterwarnings("ignore", message=_LEN_WARNING, category=UserWarning)


class StreamingDataModule(pl.LightningDataModule):
    """Streaming datasets for train / val / test / predict with exact, elastic resumption of training.

    Args:
        train: the training data (a DatasetSpec, or a plain dict of its fields); required for fit.
        val: the validation data; left out, fit runs no validation.
        test: the data trainer.test reads; left out, there is no test loader.
        predict: the data trainer.predict reads; left out, there is no predict loader.
        batch_size: samples per loader batch on each device. May be left out when global_batch_size
            is given; it is then global_batch_size / data-parallel ranks.
        global_batch_size: samples per loader batch over all data-parallel ranks. When set, it is
            checked against batch_size x ranks. Keep it fixed to resume on a different number of
            processes.
        eval_batch_size: per-device batch size for val / test / predict (default: the training one).
        drop_last: drop the partial last global batch of every training epoch on every rank. Evaluation
            loaders never drop: they yield every sample once, and on several ranks the last batch of a
            rank may end with one repeat; trainer.val_dataloaders.real_samples(batch_idx) says how
            many samples of a batch to count (docs/order.md, "Exact evaluation").
        num_workers: DataLoader worker processes per rank (0: load in the training process).
        pin_memory: copy batches into pinned memory, for faster transfers to a GPU.
        persistent_workers: keep the workers alive between epochs (needs num_workers > 0).
        prefetch_factor: batches each worker loads ahead (PyTorch's default when left out).
        timeout: seconds to wait for a batch from a worker (0: no limit).
        multiprocessing_context: how workers start: fork, spawn or forkserver (PyTorch's default).
        collate_fn: turns a list of samples into a batch (default: PyTorch's, without the warning
            about read-only arrays).
        worker_init_fn: called in each worker with its id. Workers outlive SIGTERM and SIGUSR1 sent to
            the whole process group, so that only the training processes act on them; a SIGTERM from
            their own training process still ends them (stream_plugin.preemption.WorkerSignalGuard).
        data_parallel_dims: under a strategy with a ``device_mesh`` (``ModelParallelStrategy``), the
            names of its dims whose ranks read different samples; the other dims (tensor, context,
            pipeline parallel) get the same batches. Default: the dims named ``data_parallel``,
            ``dp``, ``dp_replicate``, ``dp_shard``, ``data_parallel_replicate`` or
            ``data_parallel_shard``. Batch sizes then count data-parallel ranks (docs/parallelism.md).
        check_layout: at the first batch of training and of every evaluation loader, the ranks compare
            a digest of their first batch against the layout the strategy implies (its mesh, else
            every rank its own data), and stop with an error naming the ranks and the fix when they
            disagree (a wrong ``replication``, a rank-dependent seed). One collective per pass start.

    A plain dict of DatasetSpec fields is accepted for each split; the annotation stays
    DatasetSpec so that LightningCLI checks a YAML file against the fields and their choices.
    """

    def __init__(
        self,
        train: DatasetSpec | None = None,
        val: DatasetSpec | None = None,
        test: DatasetSpec | None = None,
        predict: DatasetSpec | None = None,
        *,
        batch_size: int | None = None,
        global_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        drop_last: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        timeout: float = 0,
        multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        data_parallel_dims: Sequence[str] | None = None,
        check_layout: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("global_batch_size", global_batch_size),
            ("eval_batch_size", eval_batch_size),
            ("prefetch_factor", prefetch_factor),
        ):
            check_int(name, value, minimum=1, allow_none=True)
        if batch_size is None and global_batch_size is None:
            raise ConfigError(
                "StreamingDataModule: expected batch_size (per device) or global_batch_size, found neither; "
                "pass global_batch_size to keep resumption exact on any number of processes"
            )
        check_int("num_workers", num_workers, minimum=0)
        if persistent_workers and num_workers == 0:
            raise ConfigError(
                "persistent_workers: expected num_workers > 0 with persistent_workers=True, found "
                "num_workers=0; set num_workers or drop persistent_workers"
            )
        self.specs: dict[Split, DatasetSpec | None] = {
            "train": as_dataset_spec("train", train),
            "val": as_dataset_spec("val", val),
            "test": as_dataset_spec("test", test),
            "predict": as_dataset_spec("predict", predict),
        }
        self.batch_size = batch_size
        self.global_batch_size = global_batch_size
        self.eval_batch_size = eval_batch_size
        self.drop_last = bool(drop_last)
        self.loader_options: dict[str, Any] = {
            "num_workers": num_workers,
            "pin_memory": pin_memory,
            "persistent_workers": persistent_workers,
            "prefetch_factor": prefetch_factor,
            "timeout": timeout,
            "multiprocessing_context": multiprocessing_context,
            "collate_fn": collate_fn,
            "worker_init_fn": WorkerSignalGuard(worker_init_fn),
        }
        self.data_parallel_dims = None if data_parallel_dims is None else tuple(data_parallel_dims)
        self.check_layout = bool(check_layout)
        self.datasets: dict[Split, StreamingDataset] = {}
        # The strategy's data-parallel sub-mesh (None: every rank reads its own data), read once.
        self._mesh: DataParallelMesh | None = None
        self._mesh_read = False
        # The data-parallel coordinate of every rank as the strategy sees it, for the first-batch check.
        self._true_coordinates: tuple[int, ...] | None = None
        self._batch_sizes: BatchSizes | None = None
        # The restored training state, kept for explanations (and applied if setup comes later).
        self._restored_train_state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ building
    def build_dataset(self, split: Split, spec: DatasetSpec, batch_size: int) -> StreamingDataset:
        """Make one split's dataset; override to use a ``StreamingDataset`` subclass.

        An override should pass ``world=self.world()`` and ``**self.data_parallel_kwargs()`` on, so that a
        multi-node run knows its node layout and a model-parallel one its data-parallel ranks.
        """
        return StreamingDataset(
            batch_size=batch_size, world=self.world(), **self.data_parallel_kwargs(), **spec.dataset_kwargs()
        )

    def data_parallel_kwargs(self) -> dict[str, Any]:
        """``{"data_parallel_mesh": sub-mesh}`` under a strategy with a device mesh, else ``{}``."""
        mesh = self.data_parallel_mesh()
        return {} if mesh is None else {"data_parallel_mesh": mesh.mesh}

    def data_parallel_mesh(self) -> DataParallelMesh | None:
        """The data-parallel dims of the attached Trainer's strategy mesh; None without a mesh (DDP, FSDP,
        DeepSpeed, one process) or without a Trainer."""
        trainer = self._trainer_or_none()
        if trainer is None:
            return None
        if not self._mesh_read:
            self._mesh = data_parallel_mesh(trainer.strategy, self.data_parallel_dims)
            self._mesh_read = True
        return self._mesh

    def world(self) -> World:
        """This process's place in the job: from the attached Trainer, else detected from the environment."""
        trainer = self._trainer_or_none()
        return detect_world() if trainer is None else world_from_trainer(trainer)

    def setup(self, stage: str) -> None:
        """Build the datasets ``stage`` needs, once; the world (DDP process group) exists by now."""
        if stage == "fit" and self.specs["train"] is None:
            raise ConfigError(
                "StreamingDataModule: expected train data for fit, found train=None; pass "
                "train=DatasetSpec(streams=[StreamSpec(remote=..., local=...)])"
            )
        for split in _SPLITS_FOR_STAGE.get(stage, ()):
            spec = self.specs[split]
            if spec is None or split in self.datasets:
                continue
            self.datasets[split] = self.build_dataset(split, spec, self._device_batch_size(split))
            if split == "train" and self._restored_train_state is not None:
                self.datasets["train"].load_state_dict(self._restored_train_state)
        if self._true_coordinates is None:
            self._true_coordinates = self._coordinates_from_strategy()

    def _coordinates_from_strategy(self) -> tuple[int, ...] | None:
        """Every rank's data-parallel coordinate by the strategy (one collective under a mesh); None in
        one process or without a Trainer."""
        trainer = self._trainer_or_none()
        if trainer is None or trainer.world_size < 2:
            return None
        mesh = self.data_parallel_mesh()
        return tuple(range(trainer.world_size)) if mesh is None else mesh_coordinates(mesh.mesh)

    def _layout_check(self) -> bool | tuple[int, ...]:
        """The loaders' ``check_layout``: the strategy's coordinates, or off."""
        if not self.check_layout or self._true_coordinates is None:
            return False
        return self._true_coordinates

    def _train_batch_sizes(self) -> BatchSizes:
        if self._batch_sizes is None:
            spec = self.specs["train"] or self._first_spec()
            self._batch_sizes = resolve_batch_sizes(
                self.batch_size,
                self.global_batch_size,
                self.world().world_size,
                spec.replication or 1,
                self.data_parallel_mesh(),
            )
        return self._batch_sizes

    def _first_spec(self) -> DatasetSpec:
        for spec in self.specs.values():
            if spec is not None:
                return spec
        return DatasetSpec()

    def _device_batch_size(self, split: Split) -> int:
        if split != "train" and self.eval_batch_size is not None:
            return self.eval_batch_size
        return self._train_batch_sizes().per_device

    def _dataset(self, split: Split) -> StreamingDataset:
        dataset = self.datasets.get(split)
        if dataset is None:
            configured = self.specs[split] is not None
            raise ConfigError(
                f"StreamingDataModule: expected a {split} dataset, found "
                + (
                    "none built yet; call setup() first (the Trainer does)"
                    if configured
                    else f"{split}=None; pass {split}=DatasetSpec(...)"
                )
            )
        return dataset

    # ------------------------------------------------------------------ loaders
    def _loader_kwargs(self, split: Split) -> dict[str, Any]:
        drop_last = self.drop_last and split == "train"
        return {
            "batch_size": self._device_batch_size(split),
            "drop_last": drop_last,
            "check_layout": self._layout_check(),
            **self.loader_options,
        }

    def train_dataloader(self) -> TrainLoader:
        _skip_lightnings_length_warning()
        dataset = self._dataset("train")
        return TrainLoader(
            dataset,
            state_now=self._train_state_from_trainer,
            expected_after_first_batch=self._expected_after_first_batch,
            on_mismatch=self._raise_position_mismatch,
            **self._loader_kwargs("train"),
        )

    def _eval_loader(self, split: Split) -> EvalLoader | list[Any]:
        if self.specs[split] is None:
            return []  # Lightning skips a stage whose loader list is empty
        _skip_lightnings_length_warning()
        return EvalLoader(self._dataset(split), **self._loader_kwargs(split))

    val_dataloader = _EvalLoaderHook("val")
    test_dataloader = _EvalLoaderHook("test")
    predict_dataloader = _EvalLoaderHook("predict")

    # ------------------------------------------------------------------ state
    def _trainer_or_none(self) -> pl.Trainer | None:
        # LightningDataModule.trainer is None until a Trainer attaches the module.
        return self.trainer

    def _fitting_trainer(self) -> pl.Trainer | None:
        trainer = self._trainer_or_none()
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return None
        return trainer

    def _train_state_from_trainer(self) -> dict[str, int | str] | None:
        trainer = self._fitting_trainer()
        dataset = self.datasets.get("train")
        if trainer is None or dataset is None:
            return None
        return state_at(dataset, train_position(trainer), batches_per_epoch(dataset, trainer))

    def _expected_after_first_batch(self) -> dict[str, int | str] | None:
        trainer = self._fitting_trainer()
        dataset = self.datasets.get("train")
        if trainer is None or dataset is None or not trainer.training:
            return None
        position = train_position(trainer)
        after_one = TrainPosition(epoch=position.epoch, batches=position.batches + 1)
        return state_at(dataset, after_one, batches_per_epoch(dataset, trainer))

    def state_dict(self) -> dict[str, Any]:
        """``{"train": resume state}``: the position of training by Lightning's counters (rank-independent)."""
        dataset = self.datasets.get("train")
        if dataset is None:
            return {"train": self._restored_train_state} if self._restored_train_state else {}
        state = self._train_state_from_trainer()
        return {"train": state if state is not None else dataset.state_dict(0)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue training from a state written by ``state_dict`` (applied at the next train pass)."""
        train_state = state_dict.get("train")
        if train_state is None:
            return
        self._restored_train_state = dict(train_state)
        dataset = self.datasets.get("train")
        if dataset is not None:
            dataset.load_state_dict(self._restored_train_state)

    def _raise_position_mismatch(self, expected: Mapping[str, Any], found: Mapping[str, Any]) -> None:
        trainer = self._fitting_trainer()
        position = train_position(trainer) if trainer is not None else TrainPosition(0, 0)
        global_batch = self._train_batch_sizes().global_size
        if self._restored_train_state is None and (position.epoch, position.batches) != (0, 0):
            cause = (
                "the checkpoint holds no StreamingDataModule state (it was written by a run without this "
                "DataModule, or with save_weights_only=True), so the data would restart at epoch 0. Resume "
                "from a checkpoint written with StreamingDataModule, or start a new run"
            )
        elif found["epoch_batch_size"] != global_batch:
            cause = (
                f"the checkpoint was written mid-epoch at global batch size {found['epoch_batch_size']} and "
                f"this run's is {global_batch}; Lightning counts batches, so the rest of the epoch cannot line "
                f"up. Resume with global_batch_size={found['epoch_batch_size']}, or from a checkpoint written "
                "at an epoch boundary"
            )
        else:
            cause = (
                "the train loader was iterated outside the Trainer, or the data state was loaded into the "
                "dataset by hand after the checkpoint was restored; let the Trainer drive the loader"
            )
        raise StateError(
            f"StreamingDataModule: expected the train data to continue where Lightning's counters put "
            f"training ({position.batches} batches of epoch {position.epoch} done, {global_batch} samples per "
            f"global batch), so that after the next batch it is at epoch {expected['epoch']}, sample "
            f"{expected['sample_in_epoch']}; found it at epoch {found['epoch']}, sample "
            f"{found['sample_in_epoch']} (global batch {found['epoch_batch_size']}) after that batch; {cause}"
        )


def world_from_trainer(trainer: pl.Trainer) -> World:
    """The job's ranks as the Trainer sees them, node layout included.

    Lightning's own launcher exports ``LOCAL_RANK`` but not ``LOCAL_WORLD_SIZE``, so detection from the
    environment would take a multi-node run for one node of ``world_size`` ranks; the Trainer knows the
    layout (``num_devices`` processes on each of ``num_nodes`` nodes).
    """
    return World(
        rank=trainer.global_rank,
        world_size=trainer.world_size,
        local_rank=trainer.local_rank,
        local_world_size=trainer.num_devices,
    )
