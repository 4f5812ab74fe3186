"""``DataStateCheckpoint``: the loader's position saved inside each of the Trainer's ``checkpoint-N`` folders."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from stream_plugin import StreamingDataLoader
from stream_plugin.errors import ConfigError
from stream_plugin_transformers.data_state import checkpoint_folder, write_data_state


class DataStateCheckpoint(TrainerCallback):
    """Writes ``StreamingDataLoader.state_dict()`` into ``checkpoint-N`` right after the Trainer saved it.

    ``on_save`` runs at the same step boundary as the save, so the file holds exactly the position of
    step N: the batches of N optimizer steps, whatever ``save_steps``, ``gradient_accumulation_steps`` or
    ``dataloader_num_workers``. ``StreamingTrainer`` adds it before the caller's callbacks (so it writes
    before a ``PreemptionCheckpoint`` exits) and reads the file back in ``train(resume_from_checkpoint=...)``.
    """

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        train_loader(kwargs)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if args.should_save:
            write_data_state(
                checkpoint_folder(args.output_dir, state.global_step), train_loader(kwargs).state_dict()
            )


def train_loader(event: dict[str, Any]) -> StreamingDataLoader:
    """The Trainer's train loader from a callback event's arguments, which must be ours, unwrapped."""
    loader = event.get("train_dataloader")
    if not isinstance(loader, StreamingDataLoader):
        raise ConfigError(
            "DataStateCheckpoint: expected the Trainer to train from a StreamingDataLoader, found "
            f"{type(loader).__name__}; a plain Trainer wraps a StreamingDataset in Accelerate's loader, which "
            "splits it by rank a second time and cannot save its position: use "
            "stream_plugin_transformers.StreamingTrainer (or StreamingTrainerMixin) instead of Trainer"
        )
    return loader
