"""LightningCLI entry point of the example: ``python train.py fit --config config.yaml``.

``--ckpt_path latest`` (the config's default) resumes from the newest complete checkpoint in the
PreemptionCheckpoint's folder, and starts fresh when there is none, so a preempted job is restarted by
running the same command again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI

sys.path.insert(0, str(Path(__file__).resolve().parent))  # example_model, when run from another folder

from example_model import IdRecordingRegressor  # noqa: E402

from stream_plugin_lightning import PreemptionCheckpoint, latest_checkpoint  # noqa: E402


class ResumingCLI(LightningCLI):
    """LightningCLI whose ``fit`` understands ``ckpt_path: latest``."""

    def fit(self, model: Any, ckpt_path: str | None = None, **kwargs: Any) -> None:
        if ckpt_path == "latest":
            ckpt_path = latest_checkpoint(self._checkpoint_folder())
            print(
                f"resuming from {ckpt_path}" if ckpt_path else "no checkpoint yet: starting fresh", flush=True
            )
        self.trainer.fit(model, ckpt_path=ckpt_path, **kwargs)

    def _checkpoint_folder(self) -> Path:
        for callback in self.trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, PreemptionCheckpoint):
                return Path(callback.checkpoint_path(self.trainer)).parent
        return Path(self.trainer.default_root_dir) / "checkpoints"


def main(args: list[str] | None = None) -> ResumingCLI:
    # The config file names the DataModule class (--data), so any LightningDataModule can be used.
    return ResumingCLI(IdRecordingRegressor, save_config_callback=None, args=args)


if __name__ == "__main__":
    main()
