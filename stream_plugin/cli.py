"""The ``stream-plugin`` command (also ``python -m stream_plugin``): inspect, verify and convert datasets.

``inspect`` and ``verify`` accept a local folder or a remote URL (``s3://``, ``file://``, ...). A folder
holding several streams (sub-folders with their own ``index.json``) is walked stream by stream.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_plugin._version import __version__
from stream_plugin.errors import StreamPluginError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry, parse_index
from stream_plugin.parquet import cli_index as parquet_cli
from stream_plugin.progress import ProgressBar
from stream_plugin.redaction import RedactingWriter, get_logger
from stream_plugin.units import format_bytes

# Exit status of a command whose reader went away (`inspect ... | head`), as if killed by SIGPIPE.
BROKEN_PIPE_EXIT = 128 + 13


@dataclass(frozen=True)
class StreamLocation:
    """One stream found under the root the user named: ``prefix`` is its path relative to that root."""

    prefix: str
    entries: list[ShardEntry]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def find_streams(root: str) -> list[StreamLocation]:
    """Every stream under ``root``: the root itself if it holds an index, else sub-folders that do."""
    from stream_plugin.storage import open_store

    store = open_store(root)
    if store.exists(INDEX_BASENAME):
        keys = [INDEX_BASENAME]
    else:
        keys = sorted(key for key in store.list("") if key.endswith("/" + INDEX_BASENAME))
        # A merged dataset's sub-folders also hold indexes: keep only the outermost ones.
        prefixes = [key[: -len(INDEX_BASENAME) - 1] for key in keys]
        keys = [
            key
            for key, prefix in zip(keys, prefixes)
            if not any(prefix.startswith(other + "/") for other in prefixes if other != prefix)
        ]
    if not keys:
        raise StreamPluginError(
            f"{root}: expected a dataset folder holding {INDEX_BASENAME} (or sub-folders that do), found "
            "none; point at the folder a writer produced"
        )
    streams = []
    for key in keys:
        prefix = key[: -len(INDEX_BASENAME)].rstrip("/")
        text = store.read_bytes(key)
        streams.append(StreamLocation(prefix, parse_index(text, source=_join(root.rstrip("/"), key))))
    return streams


def _columns(entry: ShardEntry) -> dict[str, str]:
    config = entry.config
    if entry.format == "json":
        return dict(sorted(config.get("columns", {}).items()))
    return dict(zip(config.get("column_names", []), config.get("column_encodings", [])))


def describe_stream(stream: StreamLocation, *, with_shards: bool) -> dict[str, Any]:
    """What ``inspect`` reports about one stream, as plain JSON values."""
    entries = stream.entries
    described: dict[str, Any] = {
        "stream": stream.prefix or ".",
        "shards": len(entries),
        "samples": sum(entry.samples for entry in entries),
        "formats": sorted({entry.format for entry in entries}),
        "columns": _columns(entries[0]) if entries else {},
        "compression": sorted({entry.compression or "none" for entry in entries}),
        "hashes": sorted({name for entry in entries for name in entry.hashes}),
        "raw_bytes": sum(pair[0].bytes for entry in entries for pair in entry.file_pairs()),
        "stored_bytes": sum((pair[1] or pair[0]).bytes for entry in entries for pair in entry.file_pairs()),
    }
    if with_shards:
        described["shard_list"] = [
            {"id": shard_id, "samples": entry.samples, "stored_bytes": entry.stored_data.bytes,
             "basename": entry.stored_data.basename}
            for shard_id, entry in enumerate(entries)
        ]
    return described


def _print_stream(stream: dict[str, Any]) -> None:
    columns = ", ".join(f"{name}:{encoding}" for name, encoding in stream["columns"].items())
    print()
    print(f"stream: {stream['stream']}")
    print(f"  shards:       {stream['shards']}")
    print(f"  samples:      {stream['samples']:,}")
    print(f"  format:       {', '.join(stream['formats'])}")
    print(f"  columns:      {columns or '-'}")
    print(f"  compression:  {', '.join(stream['compression'])}")
    print(f"  hashes:       {', '.join(stream['hashes']) or 'none'}")
    print(f"  size (raw):   {format_bytes(stream['raw_bytes'])}")
    print(f"  size (stored):{format_bytes(stream['stored_bytes']):>10}")
    if "shard_list" in stream:
        print("  id  samples  stored bytes  basename")
        for shard in stream["shard_list"]:
            print(f"  {shard['id']:>3} {shard['samples']:>8} {shard['stored_bytes']:>13}  {shard['basename']}")


def command_inspect(args: argparse.Namespace) -> int:
    streams = [describe_stream(stream, with_shards=args.shards) for stream in find_streams(args.dataset)]
    total_samples = sum(stream["samples"] for stream in streams)
    if args.json:
        report = {"dataset": args.dataset, "samples": total_samples, "streams": streams}
        print(json.dumps(report, indent=2))
        return 0
    print(f"dataset: {args.dataset}")
    print(f"streams: {len(streams)}   samples: {total_samples:,}")
    for stream in streams:
        _print_stream(stream)
    return 0


def _verify_shard(
    root: str, stream: StreamLocation, entry: ShardEntry, staging: Path, allow_unsafe: bool
) -> int:
    """Fetch, check and decode one shard; returns the number of samples decoded."""
    from stream_plugin.format.compression import decompress_file
    from stream_plugin.format.hashing import verify_digests
    from stream_plugin.format.reader import check_shard_file, open_shard
    from stream_plugin.storage import open_store

    store = open_store(root)
    if entry.format == "parquet":  # a byte range of a Parquet file: fetched as the cache fetches it
        from stream_plugin.parquet.download import fetch_shard

        fetch_shard(entry, root.rstrip("/") + (f"/{stream.prefix}" if stream.prefix else ""), staging)
    for raw, zipped in [] if entry.format == "parquet" else entry.file_pairs():
        stored = zipped or raw
        local_stored = staging / stored.basename
        local_stored.parent.mkdir(parents=True, exist_ok=True)
        store.download(_join(stream.prefix, stored.basename), local_stored)
        found = local_stored.stat().st_size
        if found != stored.bytes:
            raise StreamPluginError(
                f"{stored.basename}: expected {stored.bytes} bytes as index.json says, found {found}; the file "
                "is truncated or was replaced: re-upload it or regenerate the dataset"
            )
        if stored.hashes:
            verify_digests(stored.hashes, local_stored, source=stored.basename)
        if zipped is not None:
            assert entry.compression is not None
            decompress_file(
                entry.compression,
                local_stored,
                staging / raw.basename,
                source=stored.basename,
                expected_size=raw.bytes,
            )
            local_stored.unlink()
    check_shard_file(entry, staging, validate_hash=True)
    reader = open_shard(entry, staging, allow_unsafe_types=allow_unsafe)
    try:
        for start in range(0, entry.samples, 1024):
            reader.read_many(range(start, min(start + 1024, entry.samples)))
    finally:
        reader.close()
    return entry.samples


def command_verify(args: argparse.Namespace) -> int:
    from stream_plugin.errors import UnsafeTypeError

    streams = find_streams(args.dataset)
    total = sum(len(stream.entries) for stream in streams)
    progress = ProgressBar(total, label="verify", unit="shards", enabled=not args.no_progress)
    failures: list[str] = []
    unsafe: list[str] = []
    decoded = 0
    with tempfile.TemporaryDirectory(prefix="stream-plugin-verify-") as staging_root:
        for stream in streams:
            for entry in stream.entries:
                name = _join(stream.prefix, entry.stored_data.basename)
                staging = Path(tempfile.mkdtemp(dir=staging_root))
                try:
                    decoded += _verify_shard(args.dataset, stream, entry, staging, args.allow_unsafe_types)
                except UnsafeTypeError:
                    # Sizes and hashes were checked before decoding; only the pickle columns were not run.
                    unsafe.append(name)
                except (StreamPluginError, OSError, ValueError) as error:
                    failures.append(f"{name}: {error}")
                progress.advance(nbytes=entry.stored_data.bytes)
    progress.close()
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    if unsafe:
        print(
            f"note: {len(unsafe)} shards have pkl columns; their sizes and hashes were checked but their samples "
            "were not decoded (pickle runs code). Pass --allow-unsafe-types if you trust this dataset",
            file=sys.stderr,
        )
    if failures:
        print(f"{len(failures)} of {total} shards failed verification", file=sys.stderr)
        return 1
    skipped = f"; {len(unsafe)} shards with pkl columns not decoded" if unsafe else ""
    print(f"ok: {total} shards verified (sizes, hashes), {decoded:,} samples decoded{skipped}")
    return 0


def command_convert(args: argparse.Namespace) -> int:
    from stream_plugin.converters.cli_convert import run_convert

    written = run_convert(args)
    print(f"wrote {written:,} samples to {args.out}")
    return 0


def command_simulate(args: argparse.Namespace) -> int:
    from stream_plugin.simulate import simulate
    from stream_plugin.simulate.config import build_run, read_config, read_options, read_streams
    from stream_plugin.simulate.report import format_table, require_plotting, to_json, write_report

    options = read_options(vars(args))
    if args.report is not None:
        require_plotting()  # before a long simulation, not after it
    run = read_config(args.config)
    if args.calibrate:
        from stream_plugin.simulate.calibrate import calibrate

        if run.synthetic is not None:
            raise StreamPluginError(
                "--calibrate: expected a CONFIG with real shards, found a synthetic shape; pass "
                "--decompress-rate and --sample-time instead"
            )
        measured = calibrate(
            read_streams(run.dataset),
            allow_unsafe_types=bool(run.dataset.get("allow_unsafe_types")),
            batch_size=int(options.get("batch_size") or run.dataset.get("batch_size") or 1),
        )
        given = {name: value for name, value in measured.options().items() if name in options}
        options = {**measured.options(), **options}  # a value given on the command line wins
        print(
            f"calibrated on {measured.shards} shard(s), {measured.samples:,} samples: "
            + ", ".join(f"{name} {value:.3g}" for name, value in measured.options().items())
            + (f" (the command line's {', '.join(given)} kept)" if given else ""),
            file=sys.stderr,
        )
    workload, hardware = build_run(run, options)
    price = float(options.get("egress_price_per_gb", 0.0))
    if args.tune and options.get("target_first_batch") is not None:
        from stream_plugin.simulate.report import format_start_up
        from stream_plugin.simulate.tune import tune_start_up

        found = tune_start_up(workload, hardware, target_first_batch=float(options["target_first_batch"]))
        print(
            json.dumps([candidate.summary() for candidate in found], indent=2)
            if args.json
            else format_start_up(found, float(options["target_first_batch"])),
            end="\n" if args.json else "",
        )
        return 0
    if args.tune:
        from stream_plugin.simulate.report import format_tuning
        from stream_plugin.simulate.tune import tune

        result = tune(
            workload, hardware, target_throughput=options.get("target_throughput"), price_per_gb=price
        )
        print(
            json.dumps(result.summary(), indent=2) if args.json else format_tuning(result),
            end="\n" if args.json else "",
        )
        if args.report is not None and result.candidates:
            first = result.candidates[0]
            page = write_report(first.simulation, args.report, price_per_gb=price)
            print(f"report of the first-ranked setting ({first.setting.to_dict()}): {page}", file=sys.stderr)
        return 0
    simulation = simulate(workload, hardware)
    if args.report is not None:
        page = write_report(simulation, args.report, price_per_gb=price)
        print(f"report: {page}", file=sys.stderr)
    print(
        to_json(simulation, price_per_gb=price)
        if args.json
        else format_table(simulation, price_per_gb=price),
        end="\n" if args.json else "",
    )
    return 0


def _add_simulate_options(simulate: argparse.ArgumentParser) -> None:
    """``stream-plugin simulate``'s options, from the one table of them (``simulate.config.OPTIONS``)."""
    from dataclasses import fields as dataclass_fields

    from stream_plugin.simulate.config import OPTIONS
    from stream_plugin.simulate.model import Hardware

    defaults = {item.name: item.default for item in dataclass_fields(Hardware)}
    simulate.add_argument(
        "config",
        metavar="CONFIG",
        help="the dataset's arguments (YAML/JSON), an index.json, a dataset folder or URL, a synthetic shape, "
        "a LightningCLI YAML with our DataModule, or an llm-foundry YAML with our loader",
    )
    groups = {
        "hardware": simulate.add_argument_group("hardware"),
        "dataset": simulate.add_argument_group("dataset settings (override CONFIG's)"),
        "run": simulate.add_argument_group("run"),
    }
    for option in OPTIONS:
        default = defaults.get(option.name)
        shown = (
            f"; default {default:g}"
            if isinstance(default, (int, float)) and option.group == "hardware"
            else ""
        )
        groups[option.group].add_argument(
            option.flag,
            dest=option.name,
            metavar=option.metavar,
            help=f"{option.help} [{option.unit}{shown}]",
        )
    output = simulate.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    output.add_argument(
        "--report",
        metavar="DIR",
        help="also write plots (PNG) and a self-contained index.html into DIR (needs [simulate])",
    )
    output.add_argument(
        "--calibrate",
        action="store_true",
        help="measure --decompress-rate and --sample-time on a few real shards of CONFIG (downloads them)",
    )
    output.add_argument(
        "--tune",
        action="store_true",
        help="search predownload, workers, cache_limit and shuffle_block_size for the cheapest setting that does "
        "not stall; with --report, the report is the first-ranked setting's",
    )


_EXAMPLES = {
    "inspect": "stream-plugin inspect s3://bucket/my-dataset\n  stream-plugin inspect ./my-dataset --shards --json",
    "verify": "stream-plugin verify s3://bucket/my-dataset\n  stream-plugin verify ./my-dataset --no-progress",
    "convert": "stream-plugin convert rows.jsonl ./my-dataset --compression zstd --size-limit 64mb\n"
    "  stream-plugin convert rows.csv s3://bucket/my-dataset --columns text:str,label:int --hashes sha1\n"
    "  stream-plugin convert part-*.jsonl ./my-dataset --workers 4",
    "index-parquet": "stream-plugin index-parquet s3://bucket/parquet-dataset\n"
    "  stream-plugin index-parquet hf://datasets/ORG/NAME/data --out ./my-index --shard-bytes 32mb",
    "simulate": "stream-plugin simulate dataset.yaml --nodes 4 --bandwidth 10gbit --step-time 0.25 --epochs 2\n"
    "  stream-plugin simulate s3://bucket/my-dataset --batch-size 32 --calibrate --report ./report\n"
    "  stream-plugin simulate lightning.yaml --nodes 8 --rate-limit 3500 --egress-price-per-gb 0.09 --json",
}


def _add_command(commands: Any, name: str, summary: str) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"examples:\n  {_EXAMPLES[name]}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stream-plugin",
        description="Inspect, verify, convert and simulate stream_plugin / MosaicML Streaming datasets.",
        epilog="examples:\n" + "".join(f"  {example}\n" for example in _EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"stream-plugin {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = _add_command(commands, "inspect", "print streams, shards, samples, columns, compression and sizes")
    inspect.add_argument("dataset", help="a local folder or a URL (s3://bucket/path, file:///path)")
    inspect.add_argument("--shards", action="store_true", help="also list every shard")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(run=command_inspect)

    verify = _add_command(commands, "verify", "check sizes and hashes and decode every sample")
    verify.add_argument("dataset", help="a local folder or a URL (s3://bucket/path, file:///path)")
    verify.add_argument(
        "--allow-unsafe-types", action="store_true", help="also decode pkl columns (runs pickle)"
    )
    verify.add_argument("--no-progress", action="store_true", help="hide the progress display")
    verify.set_defaults(run=command_verify)

    convert = _add_command(
        commands, "convert", "convert JSON lines / CSV / TSV / Parquet files or a saved Hugging Face dataset into MDS"
    )
    convert.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=".jsonl/.json, .csv, .tsv or .parquet files (written in this order; .parquet needs [parquet]), or "
        "one folder saved by datasets' save_to_disk (needs [hf])",
    )
    convert.add_argument("out", help="the output folder or remote URL")
    convert.add_argument(
        "--workers", type=int, default=1, help="processes writing in parallel (same sample order for any N)"
    )
    convert.add_argument(
        "--columns",
        help="name:encoding pairs separated by commas (such as text:str,label:int); inferred when omitted",
    )
    convert.add_argument("--compression", default=None, help="such as zstd, zstd:7, gz, bz2, br, snappy")
    convert.add_argument("--size-limit", default="64mb", help="shard size limit, such as 64mb (the default)")
    convert.add_argument(
        "--hashes", default=None, help="hash algorithms separated by commas, such as sha1,xxh64"
    )
    convert.add_argument("--exist-ok", action="store_true", help="replace an existing dataset in OUT")
    convert.add_argument("--no-progress", action="store_true", help="hide the progress display")
    convert.set_defaults(run=command_convert)

    index_parquet = _add_command(
        commands, "index-parquet", "index a folder of Parquet files from their footers, to stream it without converting"
    )
    parquet_cli.add_options(index_parquet)
    index_parquet.set_defaults(run=parquet_cli.run)

    simulate = _add_command(
        commands,
        "simulate",
        "simulate a training run's data loading: stalls, egress, cache needs and shuffle",
    )
    _add_simulate_options(simulate)
    simulate.set_defaults(run=command_simulate)
    return parser


def flag_names(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """Python argument names -> the flags a user types for ``command`` (``exist_ok`` -> ``--exist-ok``)."""
    subparsers = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    names: dict[str, str] = {}
    for action in subparsers.choices[command]._actions:
        long_flags = [flag for flag in action.option_strings if flag.startswith("--")]
        if long_flags and action.dest != "help":
            names[action.dest] = long_flags[0]
    return names


def as_flags(message: str, names: dict[str, str]) -> str:
    """``message`` with Python argument names written as flags: ``pass exist_ok=True`` -> ``pass --exist-ok``.

    Only names with an underscore are rewritten: one-word names (``json``, ``columns``) are also words.
    """
    for dest, flag in names.items():
        if "_" not in dest:
            continue
        message = re.sub(rf"\b{dest}=True\b", flag, message)
        message = re.sub(rf"\b{dest}=", f"{flag} ", message)
        message = re.sub(rf"(?<![-\w.]){dest}\b", flag, message)
    return message


class _FlagFormatter(logging.Formatter):
    """Log lines as ``stream-plugin: warning: ...``, with argument names written as flags."""

    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self.names = names

    def format(self, record: logging.LogRecord) -> str:
        return f"stream-plugin: {record.levelname.lower()}: {as_flags(record.getMessage(), self.names)}"


def _configure_logging(names: dict[str, str]) -> None:
    """Show the library's warnings (retried uploads, a tiny size limit, ...) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_FlagFormatter(names))
    logger = get_logger("stream_plugin")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away: point stdout at /dev/null so the exit flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return BROKEN_PIPE_EXIT


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; everything it prints passes the redaction rule (no password or token shows)."""
    stdout, stderr = RedactingWriter(sys.stdout), RedactingWriter(sys.stderr)
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            return _main(argv)
    finally:
        for writer in (stdout, stderr):
            with suppress(BrokenPipeError, ValueError):
                writer.flush()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    names = flag_names(parser, args.command)
    _configure_logging(names)
    try:
        code = int(args.run(args))
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (StreamPluginError, OSError) as error:
        print(f"stream-plugin {args.command}: error: {as_flags(str(error), names)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
