"""Parallel local conversion: N processes write contiguous slices of the inputs, merged in input order.

``map_to_mds(fn, inputs, out, columns=..., workers=N)`` has the shape of litdata's
``optimize(fn, inputs, ...)``: ``fn(input)`` yields the samples of one input. ``files_to_mds(paths,
out, workers=N)`` converts row files (JSON lines, CSV, TSV, Parquet) the same way.

The sample order of the result is the inputs' order, each input's samples in ``fn``'s order, whatever
N is: the inputs are cut into contiguous parts, each part is written to ``out/<part>`` by one process,
and the parts are merged in order. With one worker the dataset is written straight into ``out``.
Worker processes are spawned, so ``fn`` must be importable (a module-level function, not a lambda).
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from functools import partial
from pathlib import Path
from queue import Empty
from typing import Any

from stream_plugin.converters.output import (
    PartedOutput,
    check_writer_options,
    drop_local_copy,
    merge_parts,
    part_stored_bytes,
    prepare_output,
)
from stream_plugin.converters.reporting import ConversionProgress, ConversionSummary
from stream_plugin.errors import ConfigError, check_int
from stream_plugin.format.writer import MDSWriter
from stream_plugin.format.writer_base import ShardWriter

__all__ = ["files_to_mds", "map_to_mds", "part_slices"]

SampleFn = Callable[[Any], Iterable[Mapping[str, Any]]]
Progress = tuple[str, int, int, int]  # (part, new samples, the part's stored bytes so far, new inputs done)
PARTS_PER_WORKER = 4  # more parts than workers, so one slow part does not leave the others idle


def part_slices(count: int, workers: int) -> list[range]:
    """Contiguous, non-empty ranges of input positions, one per part, in input order."""
    parts = min(count, workers * PARTS_PER_WORKER)
    # Part p holds inputs [floor(p*count/parts), floor((p+1)*count/parts)).
    bounds = [part * count // parts for part in range(parts + 1)]
    return [range(start, stop) for start, stop in zip(bounds, bounds[1:])]


class PartCounter:
    """Counts one part's samples and finished inputs; hands them on at most 5 times a second."""

    def __init__(self, part: str, send: Callable[[Progress], None]) -> None:
        self.part = part
        self._send = send
        self._samples = 0
        self._inputs = 0
        self._sent = 0.0

    def sample(self, writer: ShardWriter) -> None:
        self._samples += 1
        if self._samples & 255 == 0:
            self._maybe_send(writer)

    def input_done(self, writer: ShardWriter) -> None:
        self._inputs += 1
        self._maybe_send(writer)

    def flush(self, writer: ShardWriter) -> None:
        self._maybe_send(writer, force=True)

    def _maybe_send(self, writer: ShardWriter, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._sent >= 0.2:
            self._sent = now
            self._send((self.part, self._samples, writer.stored_bytes, self._inputs))
            self._samples = self._inputs = 0


def _write_part(
    fn: SampleFn, inputs: Sequence[Any], writer_options: dict[str, Any], counter: PartCounter
) -> int:
    samples = 0
    with MDSWriter(**writer_options) as writer:
        for item in inputs:
            for sample in fn(item):
                writer.write(sample)
                samples += 1
                counter.sample(writer)
            counter.input_done(writer)
    counter.flush(writer)  # after the writer closed its last shard: the final stored size
    return samples


_progress_queue: Any = None  # set in each worker process by _start_worker


def _start_worker(queue: Any) -> None:
    global _progress_queue
    _progress_queue = queue


def _run_part(
    fn: SampleFn, inputs: Sequence[Any], writer_options: dict[str, Any], output: PartedOutput, part: str
) -> tuple[int, int]:
    """In a worker process: write one part; returns (samples, stored bytes)."""
    counter = PartCounter(part, _progress_queue.put)
    samples = _write_part(fn, inputs, {**writer_options, "out": output.part_out(part)}, counter)
    return samples, part_stored_bytes(output, part)


def _check_picklable(fn: SampleFn, inputs: Sequence[Any]) -> None:
    try:
        pickle.dumps(fn)
        pickle.dumps(inputs[:1])
    except Exception as error:
        raise ConfigError(
            f"map_to_mds: expected fn and inputs that can be sent to worker processes, found "
            f"{type(error).__name__}: {error}; define fn at module level (not a lambda or closure), or pass "
            "workers=1"
        ) from error


def map_to_mds(
    fn: SampleFn,
    inputs: Iterable[Any],
    out: str | tuple[str, str],
    *,
    columns: Mapping[str, str],
    workers: int = 1,
    progress: bool = True,
    **writer_options: Any,
) -> int:
    """Write the samples ``fn`` yields for each input, in input order, with ``workers`` processes.

    ``writer_options`` are MDSWriter's (``compression``, ``hashes``, ``size_limit``, ``keep_local``,
    ``exist_ok``, ...). Returns the number of samples written. A failure in any part leaves no
    top-level index.json.
    """
    workers = check_int("map_to_mds: workers", workers, minimum=1, fix="pass workers=2")
    items = list(inputs)
    if not items:
        raise ConfigError("map_to_mds: expected at least one input, found none; pass a non-empty list")
    options = {**writer_options, "columns": dict(columns)}
    check_writer_options({**options, "out": out}, caller="map_to_mds")
    started = time.monotonic()
    if workers == 1:
        display = ConversionProgress(None, label="convert", enabled=progress, inputs=len(items))

        def show(update: Progress) -> None:
            display.advance(update[1], update[2], update[3])

        samples = _write_part(fn, items, {**options, "out": out}, PartCounter("0", show))
        display.close()
        summary = ConversionSummary(1, samples, display.stored_bytes, time.monotonic() - started)
    else:
        summary = _map_in_processes(fn, items, out, options, workers, progress, started)
    summary.report("convert", out if isinstance(out, str) else out[1], show=progress)
    return summary.samples


def _map_in_processes(
    fn: SampleFn,
    items: list[Any],
    out: str | tuple[str, str],
    options: dict[str, Any],
    workers: int,
    progress: bool,
    started: float,
) -> ConversionSummary:
    _check_picklable(fn, items)
    output = prepare_output(out, exist_ok=bool(options.pop("exist_ok", False)), caller="map_to_mds")
    keep_local = output.remote is None or bool(options.get("keep_local"))
    options["keep_local"] = True  # the merge reads every part's index locally
    slices = part_slices(len(items), workers)
    names = [str(part) for part in range(len(slices))]
    display = ConversionProgress(
        None, label=f"convert ({workers} workers)", enabled=progress, inputs=len(items)
    )
    part_bytes = dict.fromkeys(names, 0)
    finished: dict[str, tuple[int, int]] = {}  # part -> (samples, stored bytes), from the worker's result

    def show(update: Progress) -> None:
        part, samples, stored, inputs_done = update
        if part not in finished:  # a late count must not undo the part's final size
            part_bytes[part] = stored
        display.advance(samples, sum(part_bytes.values()), inputs_done)

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_start_worker, initargs=(queue,)
    ) as pool:
        futures = {
            pool.submit(_run_part, fn, [items[i] for i in span], options, output, name): name
            for span, name in zip(slices, names)
        }
        pending = set(futures)
        while pending:
            # Wake for each finished part, or every 0.2 s to redraw from the workers' counts.
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
            _drain(queue, show)
            for future in done:
                error = future.exception()
                if error is not None:
                    for other in pending:
                        other.cancel()
                    raise error
                finished[futures[future]] = future.result()
                part_bytes[futures[future]] = finished[futures[future]][1]
    _drain(queue, show)
    display.close()
    merge_parts(output, names, keep_local=keep_local)
    drop_local_copy(output, keep_local=keep_local)
    samples = sum(count for count, _ in finished.values())
    stored = sum(size for _, size in finished.values())
    return ConversionSummary(len(names), samples, stored, time.monotonic() - started)


def _drain(queue: Any, show: Callable[[Progress], None]) -> None:
    while True:
        try:
            update = queue.get_nowait()
        except Empty:
            return
        show(update)


def files_to_mds(
    paths: Sequence[str | Path],
    out: str | tuple[str, str],
    *,
    columns: str | dict[str, str] | None = None,
    workers: int = 1,
    progress: bool = True,
    **writer_options: Any,
) -> int:
    """Convert row files (``.jsonl``, ``.csv``, ``.tsv``, ``.parquet``) in order; columns from the first."""
    from stream_plugin.converters.row_files import file_columns, file_samples

    if not paths:
        raise ConfigError("convert: expected at least one input file, found none; pass the files to convert")
    resolved = file_columns(paths[0], columns)
    fn = partial(file_samples, columns=resolved)
    return map_to_mds(
        fn,
        [str(path) for path in paths],
        out,
        columns=resolved,
        workers=workers,
        progress=progress,
        **writer_options,
    )
