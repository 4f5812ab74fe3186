"""``StreamingTrainerMixin``: a Hugging Face ``Trainer`` that reads a ``StreamingDataset`` once over the
ranks, in our order, and resumes it exactly from its own ``checkpoint-N`` folders.

What the plain ``Trainer`` does with an ``IterableDataset`` on D processes, and why it is wrong here:
it wraps the dataset in a ``DataLoader`` and hands it to ``accelerator.prepare``. Accelerate's default
for an ``IterableDataset`` is ``dispatch_batches=True``: only rank 0 iterates the loader, concatenates D
of its batches and sends each rank a slice. Our dataset already yields rank 0's share only, so the run
trains rank 0's half of each epoch and never the others' (2 ranks, 256 samples, 32 steps: 256 trained,
193 distinct). With ``dispatch_batches=False`` every rank wraps its share in ``IterableDatasetShard``,
which keeps 1/D of it again. On resume the Trainer then rebuilds the loader and skips the batches
already trained by reading them again (``skip_first_batches``).

The mixin instead builds a ``StreamingDataLoader`` that is not passed to Accelerate (the Trainer moves
each batch to the device itself), adds ``DataStateCheckpoint`` so every ``checkpoint-N`` holds the
loader's position, and on ``train(resume_from_checkpoint=...)`` loads that position and turns the
Trainer's batch skipping off (``ignore_data_skip`` during the call): the next batch is the one an
uninterrupted run would have trained, on any number of processes with the same global batch.

An evaluation set that is a ``StreamingDataset`` gets an ``EvalLoader`` (epoch 0 in full at every
``evaluate``), and ``evaluation_loop`` counts each of its samples once (``evaluation``).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader
from transformers import Trainer
from transformers.trainer_utils import get_last_checkpoint

from stream_plugin import EvalLoader, StreamingDataLoader, StreamingDataset
from stream_plugin.errors import ConfigError
from stream_plugin.preemption import WorkerSignalGuard
from stream_plugin_transformers.callbacks import DataStateCheckpoint
from stream_plugin_transformers.data_state import read_data_state
from stream_plugin_transformers.evaluation import ExactGather, cut_repeats


class StreamingTrainerMixin:
    """Mix into a ``transformers.Trainer`` subclass before it: ``class MyTrainer(StreamingTrainerMixin, Trainer)``.

    With ``train_dataset`` a ``StreamingDataset`` the train loader is a ``StreamingDataLoader`` over it,
    built from the ``TrainingArguments`` (per-device batch size, ``dataloader_*`` settings, the Trainer's
    ``data_collator``); any other dataset keeps the Trainer's own loader.
    """

    def __init__(self, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
        self._data_state_to_load: dict[str, Any] | None = None
        self._eval_loaders: dict[int, EvalLoader] = {}  # by id(dataset): workers persist across evaluations
        self._evaluating: StreamingDataLoader | None = None
        super().__init__(*args, callbacks=[DataStateCheckpoint(), *(callbacks or [])], **kwargs)  # type: ignore[call-arg]

    @property
    def _trainer(self) -> Trainer:
        assert isinstance(self, Trainer), "StreamingTrainerMixin must be mixed into a transformers.Trainer"
        return self

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; a checkpoint to resume from must hold the data position (``DataStateCheckpoint``)."""
        trainer = self._trainer
        if not isinstance(trainer.train_dataset, StreamingDataset):
            return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(trainer.args.output_dir)
            if resume_from_checkpoint is None:
                raise ConfigError(
                    f"resume_from_checkpoint=True: expected a checkpoint-N folder in {trainer.args.output_dir}, "
                    "found none; pass resume_from_checkpoint=latest_checkpoint(output_dir), which is None "
                    "before the first checkpoint"
                )
        checkpoint = str(resume_from_checkpoint) if resume_from_checkpoint else None
        self._data_state_to_load = read_data_state(checkpoint) if checkpoint else None
        ignore_data_skip = trainer.args.ignore_data_skip
        trainer.args.ignore_data_skip = True  # the loader resumes from its state: nothing to skip or replay
        try:
            return super().train(checkpoint, *args, **kwargs)  # type: ignore[misc]
        finally:
            trainer.args.ignore_data_skip = ignore_data_skip
            self._data_state_to_load = None

    def get_train_dataloader(self) -> DataLoader:
        trainer = self._trainer
        dataset = trainer.train_dataset
        if not isinstance(dataset, StreamingDataset):
            return super().get_train_dataloader()  # type: ignore[misc]
        loader = streaming_train_loader(trainer, dataset)
        state = self._data_state_to_load
        if state is not None:
            loader.load_state_dict(state)
            self._data_state_to_load = None
            check_resumed_accumulation(loader, state, trainer.args.gradient_accumulation_steps)
        return loader

    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
        trainer = self._trainer
        dataset = eval_dataset
        if isinstance(dataset, str):
            dataset = trainer.eval_dataset[dataset]  # type: ignore[index]
        elif dataset is None:
            dataset = trainer.eval_dataset
        if not isinstance(dataset, StreamingDataset):
            return super().get_eval_dataloader(eval_dataset)  # type: ignore[misc]
        loader = self._eval_loaders.get(id(dataset))
        if loader is None:
            loader = EvalLoader(dataset, batch_size=trainer.args.eval_batch_size, **loader_settings(trainer))
            self._eval_loaders[id(dataset)] = loader
        return loader

    def evaluation_loop(self, dataloader: DataLoader, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.evaluation_loop``; over a ``StreamingDataLoader``, each sample counts once (``evaluation``)."""
        trainer = self._trainer
        if not isinstance(dataloader, StreamingDataLoader):
            return super().evaluation_loop(dataloader, *args, **kwargs)  # type: ignore[misc]
        gather = trainer.gather_function
        trainer.gather_function = ExactGather(trainer.accelerator, dataloader)
        self._evaluating = dataloader
        try:
            return super().evaluation_loop(dataloader, *args, **kwargs)  # type: ignore[misc]
        finally:
            trainer.gather_function = gather
            self._evaluating = None

    def prediction_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        loader = self._evaluating
        step = super().prediction_step  # type: ignore[misc]
        if loader is None:
            return step(model, inputs, *args, **kwargs)
        return cut_repeats(loader, inputs, lambda batch: step(model, batch, *args, **kwargs))


def loader_settings(trainer: Trainer) -> dict[str, Any]:
    """The ``DataLoader`` settings of the ``TrainingArguments``, with the Trainer's ``data_collator``."""
    args = trainer.args
    workers = args.dataloader_num_workers
    settings: dict[str, Any] = {
        "collate_fn": trainer.data_collator,
        "num_workers": workers,
        "pin_memory": args.dataloader_pin_memory,
        "drop_last": args.dataloader_drop_last,
    }
    if workers:
        settings.update(
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
            multiprocessing_context=args.dataloader_multiprocessing_context,
            worker_init_fn=WorkerSignalGuard(),  # workers outlive a preemption signal to the process group
        )
    return settings


def streaming_train_loader(trainer: Trainer, dataset: StreamingDataset) -> StreamingDataLoader:
    """A ``StreamingDataLoader`` over ``dataset`` with the Trainer's batch size, collator and loader settings."""
    return StreamingDataLoader(dataset, batch_size=trainer._train_batch_size, **loader_settings(trainer))


def check_resumed_accumulation(loader: StreamingDataLoader, state: dict[str, Any], accumulation: int) -> None:
    """Refuse a mid-epoch resume the Trainer would accumulate differently from an uninterrupted run.

    Without its batch skipping, the Trainer counts a resumed epoch's micro-batches from 0, so it closes the
    epoch's last, shorter accumulation group only when the epoch's batch count is a multiple of
    ``gradient_accumulation_steps``.
    """
    batches = len(loader)
    if int(state.get("sample_in_epoch", 0)) and accumulation > 1 and batches % accumulation:
        raise ConfigError(
            f"gradient_accumulation_steps: expected a divisor of the {batches} batches per epoch of each rank to "
            f"resume mid-epoch, found {accumulation}; pick a gradient_accumulation_steps (or per-device batch size) "
            "that divides it, or resume from a checkpoint at an epoch's end"
        )


class StreamingTrainer(StreamingTrainerMixin, Trainer):
    """``transformers.Trainer`` with ``StreamingTrainerMixin``: exact data order and resumption."""


__all__ = [
    "StreamingTrainer",
    "loader_settings",
    "StreamingTrainerMixin",
    "check_resumed_accumulation",
    "streaming_train_loader",
]
