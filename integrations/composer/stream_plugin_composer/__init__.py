"""Composer integration for stream_plugin: a DataSpec builder and callbacks for exact, elastic resumption.

- ``build_streaming_dataspec``: the llm-foundry ``train_loader`` builder (``name: stream_plugin``).
- ``streaming_dataspec``: wrap a ``StreamingDataLoader`` you built yourself.
- ``ExactDataResumption``: saves the data position from Composer's counters (``stream_plugin_resume``).
- ``ExactEvaluation``: metrics count every evaluation sample once on any number of ranks (``stream_plugin_exact_eval``).
- ``PreemptionCheckpoint``: SIGTERM -> finish the batch, checkpoint, exit 143 (``stream_plugin_preemption``).
- ``run_is_complete`` / ``set_aside_unfinished_checkpoints``: make "rerun the same command" autoresume.
- ``ExitIfComplete``: rerunning a finished run exits 0 instead of failing (``stream_plugin_exit_if_complete``).
"""

# The hint comes first, so a missing extra is named before a submodule fails on it.
# ruff: noqa: E402
from stream_plugin import __version__
from stream_plugin.extras import require_extra

require_extra("composer", extra="composer", needed_by="stream_plugin_composer")

from stream_plugin_composer.autoresume import (
    ExitIfComplete,
    run_is_complete,
    set_aside_unfinished_checkpoints,
)
from stream_plugin_composer.batches import num_samples_in_batch
from stream_plugin_composer.dataspec import build_streaming_dataspec, streaming_dataspec
from stream_plugin_composer.evaluation import ExactEvaluation
from stream_plugin_composer.preemption import PreemptionCheckpoint
from stream_plugin_composer.resumption import ExactDataResumption

__all__ = [
    "__version__",
    "ExitIfComplete",
    "ExactDataResumption",
    "ExactEvaluation",
    "PreemptionCheckpoint",
    "build_streaming_dataspec",
    "num_samples_in_batch",
    "run_is_complete",
    "set_aside_unfinished_checkpoints",
    "streaming_dataspec",
]
