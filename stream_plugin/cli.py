"""The ``stream-plugin`` command: inspect, verify and convert datasets.

``inspect`` and ``verify`` accept a local folder or a remote URL (``s3://``, ``file://``, ...). A folder
holding several streams (sub-folders with their own ``index.json``) is walked stream by stream.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stream_plugin.errors import StreamPluginError
from stream_plugin.format.index import INDEX_BASENAME, ShardEntry, parse_index
from stream_plugin.progress import ProgressBar


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


def _human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _columns(entry: ShardEntry) -> str:
    config = entry.config
    if entry.format == "json":
        return ", ".join(f"{name}:{kind}" for name, kind in sorted(config.get("columns", {}).items()))
    names = config.get("column_names", [])
    encodings = config.get("column_encodings", [])
    return ", ".join(f"{name}:{encoding}" for name, encoding in zip(names, encodings))


def command_inspect(args: argparse.Namespace) -> int:
    streams = find_streams(args.dataset)
    total_samples = sum(entry.samples for stream in streams for entry in stream.entries)
    print(f"dataset: {args.dataset}")
    print(f"streams: {len(streams)}   samples: {total_samples:,}")
    for stream in streams:
        entries = stream.entries
        raw_bytes = sum(pair[0].bytes for entry in entries for pair in entry.file_pairs())
        stored_bytes = sum((pair[1] or pair[0]).bytes for entry in entries for pair in entry.file_pairs())
        formats = sorted({entry.format for entry in entries})
        compressions = sorted({entry.compression or "none" for entry in entries})
        hashes = sorted({name for entry in entries for name in entry.hashes})
        print()
        print(f"stream: {stream.prefix or '.'}")
        print(f"  shards:       {len(entries)}")
        print(f"  samples:      {sum(entry.samples for entry in entries):,}")
        print(f"  format:       {', '.join(formats)}")
        print(f"  columns:      {_columns(entries[0]) if entries else '-'}")
        print(f"  compression:  {', '.join(compressions)}")
        print(f"  hashes:       {', '.join(hashes) or 'none'}")
        print(f"  size (raw):   {_human_bytes(raw_bytes)}")
        print(f"  size (stored):{_human_bytes(stored_bytes):>10}")
        if args.shards:
            print("  id  samples  stored bytes  basename")
            for shard_id, entry in enumerate(entries):
                stored = entry.stored_data
                print(f"  {shard_id:>3} {entry.samples:>8} {stored.bytes:>13}  {stored.basename}")
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
    for raw, zipped in entry.file_pairs():
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
    progress = ProgressBar(total, label="verify", enabled=not args.no_progress)
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
                progress.advance()
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
    from stream_plugin.convert import convert_file

    written = convert_file(
        args.input,
        args.out,
        columns=args.columns,
        compression=args.compression,
        size_limit=args.size_limit,
        hashes=args.hashes.split(",") if args.hashes else None,
        progress=not args.no_progress,
        exist_ok=args.exist_ok,
    )
    print(f"wrote {written:,} samples to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stream-plugin", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    inspect = commands.add_parser(
        "inspect", help="print streams, shards, samples, columns, compression and sizes"
    )
    inspect.add_argument("dataset", help="a local folder or a URL (s3://bucket/path, file:///path)")
    inspect.add_argument("--shards", action="store_true", help="also list every shard")
    inspect.set_defaults(run=command_inspect)

    verify = commands.add_parser("verify", help="check sizes and hashes and decode every sample")
    verify.add_argument("dataset", help="a local folder or a URL (s3://bucket/path, file:///path)")
    verify.add_argument(
        "--allow-unsafe-types", action="store_true", help="also decode pkl columns (runs pickle)"
    )
    verify.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    verify.set_defaults(run=command_verify)

    convert = commands.add_parser("convert", help="convert JSON lines / CSV / TSV / Parquet into MDS shards")
    convert.add_argument("input", help="a .jsonl/.json, .csv, .tsv or .parquet file")
    convert.add_argument("out", help="the output folder or remote URL")
    convert.add_argument(
        "--columns",
        help="name:encoding pairs separated by commas (such as 'text:str,label:int'); inferred when omitted",
    )
    convert.add_argument("--compression", default=None, help="such as zstd, zstd:7, gz, bz2, br, snappy")
    convert.add_argument("--size-limit", default="64mb", help="shard size limit, such as 64mb (default)")
    convert.add_argument(
        "--hashes", default=None, help="hash algorithms separated by commas, such as sha1,xxh64"
    )
    convert.add_argument("--exist-ok", action="store_true", help="replace an existing dataset in OUT")
    convert.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    convert.set_defaults(run=command_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (StreamPluginError, OSError) as error:
        print(f"stream-plugin {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
