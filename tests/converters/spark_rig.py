"""One local Spark session for a test module: ``local[2,2]`` (2 cores, a failed task is tried twice).

Python workers are started by the JVM, so they see the environment as it was when the session
started: the S3 endpoint and test credentials are set before that and stay for the module.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.s3_server import CREDENTIALS, S3Server


def require_java() -> None:
    if shutil.which("java") is None:
        pytest.fail(
            "Spark tests: expected Java 17 on PATH, found no `java`; run ./scripts/test, which installs it "
            "(apt-get install openjdk-17-jre-headless), or install a JDK 17 yourself"
        )


@contextmanager
def spark_session(s3_server: S3Server) -> Iterator[Any]:
    """A SparkSession whose tasks reach the loopback S3 server; stopped (and env restored) afterwards."""
    require_java()
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        patch.setenv("S3_ENDPOINT_URL", s3_server.endpoint_url)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("PYSPARK_PYTHON", sys.executable)
        patch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Functions defined in test modules travel by reference: workers import them from here.
        here = Path(__file__).resolve().parent
        patch.setenv(
            "PYTHONPATH", os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])
        )
        os.environ.pop("SPARK_HOME", None)
        session = (
            SparkSession.builder.master("local[2,2]")
            .appName("stream-plugin-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.python.worker.reuse", "true")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            session.stop()
