"""``--calibrate``: measure decompression and per-sample read time on a few real shards of the dataset,
and the loader's own costs on this machine: a worker's start-up and a batch's hand-over.

A few shards are downloaded into a temporary folder (one copy, removed afterwards) and go through the
real reading code: ``format.compression.decompress_file`` for compressed shards, then
``format.reader.open_shard`` and one ``read`` per sample, as the dataset reads them. The figures are
this machine's: calibrate on the kind of machine the job will run on.

``measure_loader`` times the real ``StreamingDataLoader`` over a small local dataset written for it
(samples of the measured size, ``LOADER_BATCHES`` batches): the first batch and the batches after it,
with one worker and with none. The worker's start-up is the difference of the first batches (the fork,
the worker's first iterator), the hand-over the difference per batch after it (a batch passed from the
worker's process to the trainer's).
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
LOADER_BATCHES = 24  # batches timed by measure_loader, the first apart
LOADER_ROUNDS = 3  # each loader is timed this many times; the quickest counts (the machine's own cost)
# Samples read per shard at most: enough for a stable mean, few enough to keep calibration quick.
SAMPLES_PER_SHARD = 2000


@dataclass(frozen=True)
class Calibration:
    """What the measured shards took on this machine."""

    decompress_rate: float | None  # raw bytes written per second; None when no measured shard is compressed
    sample_time: float  # seconds to read and decode one sample
    shards: int  # shards measured
    samples: int  # samples read
    worker_start: float | None = None  # seconds from the first iterator to a worker's first read
    handover: float | None = None  # seconds to pass one batch from a worker to the trainer

    def options(self) -> dict[str, float]:
        """The measurements as ``Hardware`` fields."""
        measured = {"sample_time": self.sample_time}
        if self.decompress_rate is not None:
            measured["decompress_rate"] = self.decompress_rate
        if self.worker_start is not None and self.handover is not None:
            measured |= {"worker_start": self.worker_start, "handover": self.handover}
        return measured


def _pick(indexes: Sequence[StreamIndex], count: int) -> list[tuple[StreamIndex, ShardEntry]]:
    """Up to ``count`` shards, taken from the streams in turn (a mix is measured across its streams)."""
    picked: list[tuple[StreamIndex, ShardEntry]] = []
    for position in range(max((len(index.entries) for index in indexes), default=0)):
        for index in indexes:
            if position < len(index.entries) and len(picked) < count:
                picked.append((index, index.entries[position]))
    return picked


def measure_loader(sample_bytes: int, batch_size: int) -> tuple[float, float]:
    """``(worker_start, handover)`` of the real loader on this machine, in seconds (see the module
    docstring), for samples of ``sample_bytes`` in batches of ``batch_size``."""
    from stream_plugin import MDSWriter, StreamingDataLoader, StreamingDataset

    def timed(folder: str, workers: int) -> tuple[float, float]:
        dataset = StreamingDataset(local=folder, batch_size=batch_size)
        loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
        started = time.perf_counter()
        batches = iter(loader)
        next(batches)
        first = time.perf_counter() - started
        started = time.perf_counter()
        rest = sum(1 for _ in batches)
        return first, (time.perf_counter() - started) / max(rest, 1)

    with tempfile.TemporaryDirectory(prefix="stream-plugin-calibrate-loader-") as folder:
        with MDSWriter(out=folder, columns={"data": "bytes"}, size_limit=max(1 << 20, 8 * sample_bytes)) as writer:
            for _ in range(LOADER_BATCHES * batch_size):
                writer.write({"data": bytes(sample_bytes)})
        alone = [timed(folder, 0) for _ in range(LOADER_ROUNDS)]
        with_worker = [timed(folder, 1) for _ in range(LOADER_ROUNDS)]
    first_alone, per_alone = min(first for first, _ in alone), min(per for _, per in alone)
    first_worker, per_worker = min(first for first, _ in with_worker), min(per for _, per in with_worker)
    return max(0.0, first_worker - first_alone), max(0.0, per_worker - per_alone)


def calibrate(
    indexes: Sequence[StreamIndex],
    *,
    shards: int = DEFAULT_SHARDS,
    allow_unsafe_types: bool = False,
    batch_size: int | None = None,
) -> Calibration:
    """Download ``shards`` shards of the streams, decompress and read them, and time both; with
    ``batch_size``, time the loader's worker start-up and batch hand-over too (``measure_loader``)."""
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
    worker_start = handover = None
    if batch_size is not None:
        raw_bytes = sum(raw.bytes for _, entry in picked for raw, _ in entry.file_pairs())
        sample_bytes = max(1, min(raw_bytes // max(sum(entry.samples for _, entry in picked), 1), 1 << 22))
        worker_start, handover = measure_loader(sample_bytes, batch_size)
    return Calibration(
        decompress_rate=decompressed / max(decompress_seconds, 1e-9) if decompressed else None,
        sample_time=read_seconds / max(samples, 1),
        shards=len(picked),
        samples=samples,
        worker_start=worker_start,
        handover=handover,
    )


__all__ = ["DEFAULT_SHARDS", "LOADER_BATCHES", "SAMPLES_PER_SHARD", "Calibration", "calibrate", "measure_loader"]
