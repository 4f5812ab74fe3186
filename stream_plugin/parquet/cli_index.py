"""``stream-plugin index-parquet SOURCE [--out DIR] [--shard-bytes N]``: its options and what it runs."""

from __future__ import annotations

import argparse

from stream_plugin.units import format_bytes, parse_bytes


def add_options(command: argparse.ArgumentParser) -> None:
    """The command's arguments."""
    command.add_argument("source", help="a folder or URL holding the dataset's *.parquet files")
    command.add_argument(
        "--out",
        default=None,
        help="write index.json here (a folder or URL of yours) instead of beside the data; "
        "StreamingDataset(remote=OUT) then reads the shards from SOURCE",
    )
    command.add_argument(
        "--shard-bytes", default="64mb", help="pack whole row groups into shards of up to this size (default 64mb)"
    )


def run(args: argparse.Namespace) -> int:
    """Index ``args.source``; print where the index went and what it holds."""
    from stream_plugin.parquet.indexer import index_parquet

    shard_bytes = parse_bytes(args.shard_bytes, name="--shard-bytes")
    written = index_parquet(args.source, out=args.out, shard_bytes=shard_bytes)
    print(
        f"wrote {written.index_url}: {written.files:,} files, {written.shards:,} shards of up to "
        f"{format_bytes(shard_bytes)}, {written.rows:,} rows"
    )
    return 0


__all__ = ["add_options", "run"]
