"""What ``stream-plugin convert`` runs: row files (in parallel with ``--workers``) or a saved HF dataset."""

from __future__ import annotations

import argparse

from stream_plugin.errors import ConfigError


def run_convert(args: argparse.Namespace) -> int:
    """Convert ``args.inputs`` into ``args.out``; returns the number of samples written."""
    from stream_plugin.converters.hf import is_saved_dataset
    from stream_plugin.converters.row_files import parse_columns

    options = {
        "compression": args.compression,
        "size_limit": args.size_limit,
        "hashes": args.hashes.split(",") if args.hashes else None,
        "progress": not args.no_progress,
        "exist_ok": args.exist_ok,
    }
    if any(is_saved_dataset(path) for path in args.inputs):
        if len(args.inputs) != 1 or args.workers != 1:
            raise ConfigError(
                f"convert: expected one saved Hugging Face dataset folder and --workers 1, found "
                f"{len(args.inputs)} inputs and --workers {args.workers}; convert one dataset per command"
            )
        from stream_plugin.converters.hf import hf_dataset_to_mds

        columns = parse_columns(args.columns) if args.columns else None
        return hf_dataset_to_mds(args.inputs[0], args.out, columns=columns, **options)
    from stream_plugin.converters.parallel import files_to_mds

    return files_to_mds(args.inputs, args.out, columns=args.columns, workers=args.workers, **options)
