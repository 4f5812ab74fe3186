"""``dataframe_to_mds``: write a Spark DataFrame as one MDS dataset, a partition per Spark task.

The call, arguments and return value are MosaicML Streaming 0.13's, so a notebook ports by changing
its import. Each task writes its partition with our MDSWriter into ``out/<partition id>`` (uploading
to ``remote/<partition id>`` as it goes); a task that Spark retries replaces its own sub-folder, so no
row is written twice. ``merge_index`` then writes the top-level ``index.json``: only after every task
succeeded, so a failed job leaves none.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from stream_plugin.converters.output import (
    PartedOutput,
    check_writer_options,
    drop_local_copy,
    merge_parts,
    part_stored_bytes,
    prepare_output,
)
from stream_plugin.converters.reporting import ConversionSummary
from stream_plugin.converters.spark_types import check_columns, infer_columns
from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.redaction import get_logger

__all__ = ["dataframeToMDS", "dataframe_to_mds"]

logger = get_logger(__name__)

_CALLER = "dataframe_to_mds"
_RESULT_SCHEMA = (
    "mds_path_local string, mds_path_remote string, partition long, samples long, stored_bytes long"
)


def _require_pyspark() -> Any:
    try:
        import pyspark
    except ImportError as error:
        raise MissingDependencyError(
            f"{_CALLER}: expected PySpark to be installed, found it missing; run "
            "`pip install 'stream-plugin[spark]'` (Spark also needs Java 17)"
        ) from error
    return pyspark


def _partition_writer(
    output: PartedOutput,
    writer_options: dict[str, Any],
    udf_iterable: Callable[..., Iterable[dict[str, Any]]] | None,
    udf_kwargs: dict[str, Any],
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each Spark task runs over its partition's pandas batches (sent by cloudpickle)."""

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        from stream_plugin.format.writer import MDSWriter

        context = TaskContext.get()
        if context is None:
            raise RuntimeError(f"{_CALLER}: expected to run inside a Spark task, found no TaskContext")
        part = str(context.partitionId())
        samples = 0
        # exist_ok: a retried attempt of this partition replaces what the failed one left.
        with MDSWriter(**writer_options, out=output.part_out(part), exist_ok=True) as writer:
            for frame in batches:
                records = udf_iterable(frame, **udf_kwargs) if udf_iterable else frame.to_dict("records")
                if not isinstance(records, Iterable):
                    raise ConfigError(
                        f"{_CALLER}: expected udf_iterable to return an iterable of sample dicts, found "
                        f"{type(records).__name__}; return a list or yield the samples"
                    )
                for sample in records:
                    writer.write(sample)
                    samples += 1
        local_index, remote_index = output.part_index(part)
        yield pd.DataFrame(
            {
                "mds_path_local": [local_index],
                "mds_path_remote": [remote_index],
                "partition": [int(part)],
                "samples": [samples],
                "stored_bytes": [part_stored_bytes(output, part)],
            }
        )

    return write_partition


def _resolve_columns(dataframe: Any, mds_kwargs: dict[str, Any], udf_iterable: object) -> dict[str, str]:
    if udf_iterable is not None:
        if "columns" not in mds_kwargs:
            raise ConfigError(
                f"{_CALLER}: expected mds_kwargs['columns'] when udf_iterable is given (its samples may have "
                "new columns), found none; pass the columns your udf_iterable yields"
            )
        return dict(mds_kwargs["columns"])
    if "columns" not in mds_kwargs:
        columns = infer_columns(dataframe.schema)
        logger.info("%s: columns inferred from the Spark schema: %s", _CALLER, columns)
        return columns
    columns = dict(mds_kwargs["columns"])
    check_columns(dataframe.schema, columns)
    return columns


def dataframe_to_mds(
    dataframe: Any,
    merge_index: bool = True,
    mds_kwargs: dict[str, Any] | None = None,
    udf_iterable: Callable[..., Iterable[dict[str, Any]]] | None = None,
    udf_kwargs: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """Write ``dataframe`` as MDS; returns ``(local, remote)`` (remote ``''`` when there is none).

    ``mds_kwargs`` are MDSWriter's arguments: ``out`` (required), ``columns`` (inferred from the schema
    when omitted; required with ``udf_iterable``), ``compression``, ``hashes``, ``size_limit``,
    ``keep_local``, ``exist_ok``. ``udf_iterable(pandas_frame, **udf_kwargs)`` turns each batch of a
    partition into samples. With ``merge_index`` the sub-datasets get one top-level ``index.json``.
    Spark shows its stage progress; a summary line follows on stderr unless ``progress_bar`` is False.
    """
    _require_pyspark()
    if dataframe is None or dataframe.isEmpty():
        raise ConfigError(
            f"{_CALLER}: expected a DataFrame with at least one row, found "
            f"{'None' if dataframe is None else 'an empty one'}; check the query that built it"
        )
    mds_kwargs = dict(mds_kwargs or {})
    if "out" not in mds_kwargs:
        raise ConfigError(
            f"{_CALLER}: expected mds_kwargs['out'] (a folder, a URL or a (local, remote) pair), found "
            f"keys {sorted(mds_kwargs)}; add out"
        )
    check_writer_options(mds_kwargs, caller=_CALLER)
    columns = _resolve_columns(dataframe, mds_kwargs, udf_iterable)
    output = prepare_output(mds_kwargs["out"], exist_ok=bool(mds_kwargs.get("exist_ok")), caller=_CALLER)
    # The merge reads every part's index from the local folder, so parts keep it until then.
    keep_local = output.remote is None or bool(mds_kwargs.get("keep_local"))
    writer_options = {
        key: value for key, value in mds_kwargs.items() if key not in ("out", "exist_ok", "progress_bar")
    }
    writer_options.update(columns=columns, keep_local=keep_local or merge_index)
    if udf_iterable is None:
        dataframe = dataframe.select(*columns)

    started = time.monotonic()
    task = _partition_writer(output, writer_options, udf_iterable, dict(udf_kwargs or {}))
    try:
        rows = dataframe.mapInPandas(task, schema=_RESULT_SCHEMA).collect()
    except BaseException:
        if output.temporary_local:  # nobody else knows this folder; the parts stay on the remote
            shutil.rmtree(output.local, ignore_errors=True)
        raise
    rows = sorted(rows, key=lambda row: row["partition"])
    if merge_index:
        merge_parts(output, [str(row["partition"]) for row in rows], keep_local=keep_local)
    drop_local_copy(output, keep_local=keep_local)
    summary = ConversionSummary(
        parts=len(rows),
        samples=sum(row["samples"] for row in rows),
        stored_bytes=sum(row["stored_bytes"] for row in rows),
        seconds=time.monotonic() - started,
    )
    summary.report(_CALLER, output.remote or output.local, show=bool(mds_kwargs.get("progress_bar", True)))
    return output.mds_path


def dataframeToMDS(  # noqa: N802  (MosaicML's deprecated name, kept so old notebooks run)
    dataframe: Any,
    merge_index: bool = True,
    mds_kwargs: dict[str, Any] | None = None,
    udf_iterable: Callable[..., Iterable[dict[str, Any]]] | None = None,
    udf_kwargs: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """MosaicML's older name for :func:`dataframe_to_mds`."""
    return dataframe_to_mds(dataframe, merge_index, mds_kwargs, udf_iterable, udf_kwargs)
