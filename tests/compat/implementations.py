"""The two implementations the compatibility scenarios run against, behind one small interface.

``ours`` is stream_plugin, always. ``mosaicml`` is MosaicML Streaming, only where it is importable: 0.12.0
in the Composer environment, where ``./scripts/test`` runs it (``-m mosaicml``), and 0.13.0 in the peers
environment (``source scripts/lib/venv.sh && ensure_peers_venv``); ``conftest.py`` says how the two
differ. Each scenario
asks for what it needs through ``Implementation``; MosaicML names are the interface, since they are
what a user moving over writes.
"""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

OURS = "ours"
MOSAICML = "mosaicml"


@dataclass(frozen=True)
class Implementation:
    name: str
    StreamingDataset: Any
    StreamingDataLoader: Any
    Stream: Any
    LocalDataset: Any
    MDSWriter: Any
    streams_registry: Any
    compress: Callable[[str, Any], bytes]
    parse_bytes: Callable[[Any], int]
    parse_count: Callable[[Any], int]
    clean_up: Callable[[], None]

    @property
    def is_ours(self) -> bool:
        return self.name == OURS


def mosaicml_available() -> bool:
    return importlib.util.find_spec("streaming") is not None


def load(name: str) -> Implementation:
    if name == OURS:
        from stream_plugin import LocalDataset, MDSWriter, Stream, StreamingDataLoader, StreamingDataset
        from stream_plugin.format.compression import compress
        from stream_plugin.reading.stream_registry import streams_registry
        from stream_plugin.units import parse_bytes, parse_count

        return Implementation(
            OURS,
            StreamingDataset,
            StreamingDataLoader,
            Stream,
            LocalDataset,
            MDSWriter,
            streams_registry,
            compress,
            parse_bytes,
            parse_count,
            gc.collect,
        )
    from streaming import LocalDataset as MosaicLocalDataset
    from streaming import MDSWriter as MosaicWriter
    from streaming import Stream as MosaicStream
    from streaming import StreamingDataLoader as MosaicLoader
    from streaming import StreamingDataset as MosaicDataset
    from streaming.base.compression import compress as mosaic_compress
    from streaming.base.stream import streams_registry as mosaic_registry
    from streaming.base.util import bytes_to_int, clean_stale_shared_memory, number_abbrev_to_int

    def clean_up() -> None:
        gc.collect()  # datasets of the finished scenario release their shared memory
        clean_stale_shared_memory()

    return Implementation(
        MOSAICML,
        MosaicDataset,
        MosaicLoader,
        MosaicStream,
        MosaicLocalDataset,
        MosaicWriter,
        mosaic_registry,
        mosaic_compress,
        bytes_to_int,
        number_abbrev_to_int,
        clean_up,
    )


def differs(
    request: pytest.FixtureRequest, impl: Implementation, *, ours: str = "", mosaicml: str = ""
) -> None:
    """Expect this scenario to fail on ``impl`` for the reason given (strict for ours: flip it when fixed)."""
    reason = ours if impl.is_ours else mosaicml
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=impl.is_ours))
