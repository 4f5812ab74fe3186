"""Train the tiny model with a real Composer ``Trainer`` inside the test process (one rank, CPU)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from composer import Callback, Trainer
from composer.optim import DecoupledSGDW
from composer_harness import GLOBAL_BATCH
from composer_recorder import SampleRecorder
from tiny_model import build_model

from stream_plugin_composer import ExactDataResumption, build_streaming_dataspec


def train_in_process(
    data: Path,
    root: Path,
    *,
    max_duration: str,
    save_interval: str | None = None,
    load_path: str | None = None,
    exact_resumption: bool = True,
    num_workers: int = 0,
    persistent_workers: bool = False,
    loader_in_fit: bool = False,
    device_batch_size: int = GLOBAL_BATCH,
    peek: bool = False,
    callbacks: Sequence[Callback] = (),
) -> list[list[int]]:
    """Train (resuming from ``load_path`` if given) and return the recorder's ``[epoch, *ids]`` history.

    ``root/cache`` is the dataset cache and ``root/checkpoints`` the save folder, so a resume that
    passes the same ``root`` behaves like a rerun on the same machine. ``loader_in_fit`` hands the
    loader to ``fit()`` instead of the ``Trainer`` (Composer then loads the data state at ``fit``).
    ``peek`` takes one batch from the loader before training, as a user checking shapes would.
    ``callbacks`` are added after the recorder (and ``ExactDataResumption``).
    """
    recorder = SampleRecorder(out=str(root / "history.json"))
    all_callbacks: list[Callback] = [recorder]
    if exact_resumption:
        all_callbacks.append(ExactDataResumption())
    all_callbacks.extend(callbacks)
    model = build_model()
    spec = build_streaming_dataspec(
        device_batch_size=device_batch_size,
        dataset={"remote": str(data), "local": str(root / "cache"), "shuffle": True, "shuffle_seed": 7},
        num_workers=num_workers,
        persistent_workers=persistent_workers,
    )
    if peek:
        next(iter(spec.dataloader))
    trainer = Trainer(
        model=model,
        train_dataloader=None if loader_in_fit else spec,
        optimizers=DecoupledSGDW(model.parameters(), lr=0.01),
        max_duration=max_duration,
        callbacks=all_callbacks,
        device="cpu",
        seed=17,
        save_folder=str(root / "checkpoints") if save_interval else None,
        save_interval=save_interval or "1ep",
        save_num_checkpoints_to_keep=-1,
        load_path=load_path,
        progress_bar=False,
        log_to_console=False,
    )
    try:
        trainer.fit(train_dataloader=spec if loader_in_fit else None)
    finally:
        trainer.close()
    return recorder.history
