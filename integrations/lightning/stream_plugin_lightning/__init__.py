"""Lightning integration for stream_plugin: a DataModule whose data position lives in every checkpoint,
and a callback that turns a preemption signal into an exact checkpoint and a restartable exit.

```python
from stream_plugin_lightning import DatasetSpec, PreemptionCheckpoint, StreamSpec, StreamingDataModule, latest_checkpoint

data = StreamingDataModule(train=DatasetSpec(streams=[StreamSpec(remote="s3://bucket/a", local="/cache/a")],
                                             shuffle=True), global_batch_size=256, num_workers=4)
trainer = Trainer(strategy="ddp", callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True), PreemptionCheckpoint()])
trainer.fit(model, datamodule=data, ckpt_path=latest_checkpoint("ckpt"))
```
"""

# The hint comes first, so a missing extra is named before a submodule fails on it.
# ruff: noqa: E402
from stream_plugin import __version__
from stream_plugin.extras import require_extra

require_extra("lightning", extra="lightning", needed_by="stream_plugin_lightning")

from stream_plugin_lightning.checkpoints import (
    is_complete_checkpoint,
    latest_checkpoint,
    save_checkpoint_atomically,
)
from stream_plugin_lightning.datamodule import StreamingDataModule
from stream_plugin_lightning.preemption import Preempted, PreemptionCheckpoint
from stream_plugin_lightning.specs import DatasetSpec, StreamSpec
from stream_plugin_lightning.text import StreamingTextDataModule

__all__ = [
    "__version__",
    "DatasetSpec",
    "Preempted",
    "PreemptionCheckpoint",
    "StreamSpec",
    "StreamingDataModule",
    "StreamingTextDataModule",
    "is_complete_checkpoint",
    "latest_checkpoint",
    "save_checkpoint_atomically",
]
