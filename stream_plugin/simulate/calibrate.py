"""``--calibrate``: measure decompression and per-sample read time on a few real shards of the dataset.

A few shards are downloaded into a temporary folder (one copy, removed afterwards) and go through the
real reading code: ``format.compression.decompress_file`` for compressed shards, then
``format.reader.open_shard`` and one ``read`` per sample, as the dataset reads them. The figures are
this machine's: calibrate on the kind of machine the job will run on.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stream_plugin.errors import ConfigError
from stream_plugin.format.compression import decompress_file
from stream_plugin.format.index import ShardEntry
from stream_plugin.format.reader import open_shard
from stream_plugin.simulate.config import StreamIndex
from stream_plugin.storage import open_store

DEFAULT_SHARDS = 3
# Samples read per shard at most: enough for a stable mean, few enough to keep calibration quick.
SAMPLES_PER_SHARD = 2000


@dataclass(frozen=True)
class Calibration:
    """What the measured shards took on this machine."""

    decompress_rate: float | None  # raw bytes written per second; None when no measured shard is compressed
    sample_time: float  # seconds to read and decode one sample
    shards: int  # shards measured
    samples: int  # samples read

    def options(self) -> dict[str, float]:
        """The measurements as ``Hardware`` fields."""
        measured = {"sample_time": self.sample_time}
        if self.decompress_rate is not None:
            measured["decompress_rate"] = self.decompress_rate
        return measured


def _pick(indexes: Sequence[StreamIndex], count: int) -> list[tuple[StreamIndex, ShardEntry]]:
    """Up to ``count`` shards, taken from the streams in turn (a mix is measured across its streams)."""
    picked: list[tuple[StreamIndex, ShardEntry]] = []
    for position in range(max((len(index.entries) for index in indexes), default=0)):
        for index in indexes:
            if position < len(index.entries) and len(picked) < count:
                picked.append((index, index.entries[position]))
    return picked


def calibrate(
    indexes: Sequence[StreamIndex], *, shards: int = DEFAULT_SHARDS, allow_unsafe_types: bool = False
) -> Calibration:
    """Download ``shards`` shards of the streams, decompress and read them, and time both."""
    if shards < 1:
        raise ConfigError(f"shards: expected 1 or more shards to measure, found {shards}; pass 3")
    picked = _pick(indexes, shards)
    if not picked:
        raise ConfigError(
            "--calibrate: expected a dataset with shards to measure, found none; point CONFIG at real data, or "
            "pass --decompress-rate and --sample-time"
        )
    decompressed, decompress_seconds, samples, read_seconds = 0, 0.0, 0, 0.0
    with tempfile.TemporaryDirectory(prefix="stream-plugin-calibrate-") as scratch:
        for number, (index, entry) in enumerate(picked):
            folder = Path(scratch) / str(number)
            folder.mkdir()
            store = open_store(index.location, **index.storage_options)
            if entry.format == "parquet":  # a byte range of a Parquet file, fetched as the cache fetches it
                from stream_plugin.parquet.download import fetch_shard

                fetch_shard(entry, index.location, folder)
            for raw, zipped in [] if entry.format == "parquet" else entry.file_pairs():
                stored = zipped or raw
                local = folder / stored.basename
                local.parent.mkdir(parents=True, exist_ok=True)
                store.download(stored.basename, local)
                if zipped is None:
                    continue
                assert entry.compression is not None
                started = time.perf_counter()
                decompressed += decompress_file(
                    entry.compression,
                    local,
                    folder / raw.basename,
                    source=stored.basename,
                    expected_size=raw.bytes,
                )
                decompress_seconds += time.perf_counter() - started
            reader = open_shard(entry, folder, allow_unsafe_types=allow_unsafe_types)
            try:
                count = min(entry.samples, SAMPLES_PER_SHARD)
                started = time.perf_counter()
                for sample in range(count):
                    reader.read(sample)
                read_seconds += time.perf_counter() - started
                samples += count
            finally:
                reader.close()
    return Calibration(
        decompress_rate=decompressed / max(decompress_seconds, 1e-9) if decompressed else None,
        sample_time=read_seconds / max(samples, 1),
        shards=len(picked),
        samples=samples,
    )


__all__ = ["DEFAULT_SHARDS", "SAMPLES_PER_SHARD", "Calibration", "calibrate"]
