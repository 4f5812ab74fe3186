"""dataframe_to_mds on a real local Spark (local[2,2]): types, columns, udf, remote S3, retries, failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from readback import read_all
from spark_rig import spark_session
from spark_udfs import always_fail_partition_one, fail_first_attempt, tokens
from support.s3_server import S3Server

from stream_plugin.converters import dataframe_to_mds, dataframeToMDS
from stream_plugin.errors import ConfigError
from stream_plugin.format.writer_base import OutputExistsError

pytest.importorskip("pyspark", reason="the [spark] extra is installed by ./scripts/test")
from pyspark.sql import types as T  # noqa: E402

ROWS = 40


@pytest.fixture(scope="module")
def spark(s3_server: S3Server) -> Iterator[Any]:
    with spark_session(s3_server) as session:
        yield session


def id_frame(spark: Any, rows: int = ROWS, partitions: int = 3) -> Any:
    """Rows 0..rows-1 in ``partitions`` contiguous slices (no shuffle)."""
    data = spark.sparkContext.parallelize([(i, f"text-{i}") for i in range(rows)], partitions)
    return spark.createDataFrame(data, "id long, text string")


EVERY_TYPE = T.StructType(
    [
        T.StructField("byte", T.ByteType()),
        T.StructField("short", T.ShortType()),
        T.StructField("int", T.IntegerType()),
        T.StructField("long", T.LongType()),
        T.StructField("float", T.FloatType()),
        T.StructField("double", T.DoubleType()),
        T.StructField("decimal", T.DecimalType(12, 3)),
        T.StructField("string", T.StringType()),
        T.StructField("binary", T.BinaryType()),
        T.StructField("shorts", T.ArrayType(T.ShortType())),
        T.StructField("ints", T.ArrayType(T.IntegerType(), containsNull=False)),
        T.StructField("longs", T.ArrayType(T.LongType())),
        T.StructField("floats", T.ArrayType(T.FloatType())),
        T.StructField("doubles", T.ArrayType(T.DoubleType())),
    ]
)
EVERY_ENCODING = {
    "byte": "uint8",
    "short": "uint16",
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "decimal": "str_decimal",
    "string": "str",
    "binary": "bytes",
    "shorts": "ndarray:int16",
    "ints": "ndarray:int32",
    "longs": "ndarray:int64",
    "floats": "ndarray:float32",
    "doubles": "ndarray:float64",
}


def every_type_row(i: int) -> tuple[Any, ...]:
    return (
        i % 100,
        i * 3,
        -i,
        i * 10**10,
        i / 2,
        i / 3,
        Decimal(f"{i}.125"),
        f"row {i}",
        bytes([i % 256]) * 3,
        [i, -i],
        [i, i + 1, i + 2],
        [i * 10**10],
        [i / 4],
        [i / 8, 1.0],
    )


def test_inferred_columns_cover_every_supported_type(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame([every_type_row(i) for i in range(12)], EVERY_TYPE).coalesce(2)
    out = tmp_path / "every"
    assert dataframe_to_mds(frame, mds_kwargs={"out": str(out)}) == (str(out), "")
    shard = json.loads((out / "index.json").read_text())["shards"][0]
    assert dict(zip(shard["column_names"], shard["column_encodings"])) == EVERY_ENCODING
    samples = sorted(read_all(out), key=lambda sample: sample["int"], reverse=True)
    for i, sample in enumerate(samples):
        expected = every_type_row(i)
        assert [sample[name] for name in ("byte", "short", "int", "long", "string", "binary")] == [
            expected[0],
            expected[1],
            expected[2],
            expected[3],
            expected[7],
            expected[8],
        ]
        assert sample["float"] == pytest.approx(i / 2) and sample["double"] == i / 3
        assert sample["decimal"] == Decimal(f"{i}.125")
        assert sample["ints"].dtype == np.int32 and sample["ints"].tolist() == expected[10]
        assert sample["shorts"].tolist() == expected[9] and sample["longs"].tolist() == expected[11]
        assert sample["floats"].tolist() == expected[12] and sample["doubles"].tolist() == expected[13]


def test_refused_type_names_the_column(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame([(1, True)], "id int, flag boolean")
    with pytest.raises(
        ConfigError, match=r"column 'flag': expected a Spark type with an MDS encoding.*found boolean"
    ):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "refused")})
    assert not (tmp_path / "refused").exists()


def test_explicit_columns_write_only_those_columns(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "explicit"
    dataframe_to_mds(id_frame(spark), mds_kwargs={"out": str(out), "columns": {"id": "int64"}})
    assert sorted(sample["id"] for sample in read_all(out)) == list(range(ROWS))
    assert set(read_all(out)[0]) == {"id"}


def test_explicit_columns_must_match_the_schema(spark: Any, tmp_path: Path) -> None:
    frame = id_frame(spark, rows=2)
    with pytest.raises(
        ConfigError, match=r"column 'id': mds_kwargs\['columns'\] says 'int32' but .* maps to 'int64'"
    ):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "a"), "columns": {"id": "int32"}})
    with pytest.raises(ConfigError, match=r"names 'nope', expected one of the DataFrame's columns"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "b"), "columns": {"nope": "str"}})
    nested = spark.createDataFrame([(1, {"a": 1})], "id int, meta struct<a:int>")
    dataframe_to_mds(nested, mds_kwargs={"out": str(tmp_path / "c"), "columns": {"meta": "json"}})
    assert read_all(tmp_path / "c") == [{"meta": {"a": 1}}]


def test_bad_arguments_are_refused_before_any_task(spark: Any, tmp_path: Path) -> None:
    frame = id_frame(spark, rows=2)
    with pytest.raises(ConfigError, match=r"expected mds_kwargs\['out'\]"):
        dataframe_to_mds(frame, mds_kwargs={"columns": {"id": "int64"}})
    with pytest.raises(ConfigError, match=r"expected mds_kwargs\['columns'\] when udf_iterable is given"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path)}, udf_iterable=lambda frame: [])
    with pytest.raises(ConfigError, match=r"expected a DataFrame with at least one row, found an empty one"):
        dataframe_to_mds(frame.limit(0), mds_kwargs={"out": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"expected MDSWriter options among .* found \['size'\]"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path), "size": 10})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.txt").write_text("x")
    with pytest.raises(OutputExistsError, match=r"holds files \(Directory is not empty\); pass exist_ok=True"):
        dataframe_to_mds(frame, mds_kwargs={"out": str(tmp_path / "full")})


def test_udf_iterable_turns_batches_into_samples(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "udf"
    columns = {"id": "int64", "copy": "int", "tokens": "ndarray:uint8"}
    dataframe_to_mds(
        id_frame(spark),
        mds_kwargs={"out": str(out), "columns": columns},
        udf_iterable=tokens,
        udf_kwargs={"repeat": 2},
    )
    samples = read_all(out)
    assert sorted((s["id"], s["copy"]) for s in samples) == [(i, c) for i in range(ROWS) for c in range(2)]
    assert all(bytes(s["tokens"]) == f"text-{s['id']}".encode() for s in samples)


def test_remote_out_on_s3_uploads_parts_and_merged_index(
    spark: Any, s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = s3_server.create_bucket("spark")
    local, remote = dataframe_to_mds(
        id_frame(spark),
        mds_kwargs={"out": bucket.url("ds"), "compression": "zstd", "hashes": ["sha1"], "size_limit": 256},
    )
    assert remote == bucket.url("ds") and not Path(local).exists()  # keep_local defaults to False
    keys = bucket.keys("ds/")
    assert "ds/index.json" in keys and "ds/0/index.json" in keys and len(keys) > 8
    shards = json.loads(bucket.get("ds/index.json"))["shards"]
    assert all(shard["raw_data"]["basename"].split("/")[0] in {"0", "1", "2"} for shard in shards)
    samples = read_all(tmp_path / "cache", remote=bucket.url("ds"))
    assert sorted(sample["id"] for sample in samples) == list(range(ROWS))
    assert f"dataframe_to_mds: wrote {ROWS} samples" in capsys.readouterr().err  # the closing summary


def test_retried_task_writes_its_rows_exactly_once(spark: Any, s3_server: S3Server, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket("retry")
    out = (str(tmp_path / "local"), bucket.url("ds"))
    columns = {"id": "int64", "text": "str"}
    dataframe_to_mds(
        id_frame(spark),
        mds_kwargs={"out": out, "columns": columns, "size_limit": 64, "keep_local": True},
        udf_iterable=fail_first_attempt,
    )
    assert sorted(sample["id"] for sample in read_all(tmp_path / "local")) == list(range(ROWS))
    remote_ids = [sample["id"] for sample in read_all(tmp_path / "cache", remote=bucket.url("ds"))]
    assert sorted(remote_ids) == list(range(ROWS))
    assert sorted(path.name for path in (tmp_path / "local").iterdir()) == ["0", "1", "2", "index.json"]


def test_failed_job_leaves_no_top_level_index(spark: Any, s3_server: S3Server, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket("failed")
    out = (str(tmp_path / "local"), bucket.url("ds"))
    with pytest.raises(Exception, match="partition 1 always fails"):
        dataframe_to_mds(
            id_frame(spark),
            mds_kwargs={"out": out, "columns": {"id": "int64", "text": "str"}},
            udf_iterable=always_fail_partition_one,
        )
    assert not (tmp_path / "local" / "index.json").exists()
    assert "ds/index.json" not in bucket.keys("ds/")


def test_existing_remote_dataset_is_refused(spark: Any, s3_server: S3Server, tmp_path: Path) -> None:
    bucket = s3_server.create_bucket("exists")
    bucket.put("ds/index.json", b'{"version": 2, "shards": []}')
    with pytest.raises(OutputExistsError, match=r"expected no dataset at s3://.*found an index.json there"):
        dataframe_to_mds(id_frame(spark, rows=2), mds_kwargs={"out": bucket.url("ds")})


def test_dataframeToMDS_without_merge_index_keeps_parts_separate(spark: Any, tmp_path: Path) -> None:  # noqa: N802
    out = tmp_path / "parts"
    assert dataframeToMDS(id_frame(spark), merge_index=False, mds_kwargs={"out": str(out)}) == (str(out), "")
    assert not (out / "index.json").exists()
    ids = [s["id"] for part in ("0", "1", "2") for s in read_all(out / part)]
    assert sorted(ids) == list(range(ROWS))
