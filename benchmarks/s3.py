"""The loopback S3 endpoint for the cold-start and egress figures: the test suite's moto server.

One server (in the harness process) serves every remote figure of a run; each dataset copy is
uploaded once and shared by the figures that read it.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path

from benchmarks.common import REPO_DIR

sys.path.insert(0, str(REPO_DIR / "tests"))

from support.s3_server import CREDENTIALS, S3Bucket, start_s3_server  # noqa: E402

__all__ = ["CREDENTIALS", "LoopbackS3", "loopback_s3"]


class LoopbackS3:
    """A moto server on 127.0.0.1 with one bucket; ``remote(folder, prefix)`` uploads a dataset once."""

    def __init__(self) -> None:
        self._moto, server = start_s3_server()
        self.bucket: S3Bucket = server.create_bucket("bench")
        self.endpoint_url = server.endpoint_url
        self._uploaded: dict[str, str] = {}

    def remote(self, folder: Path, prefix: str) -> str:
        """The ``s3://`` URL of ``folder``'s files (benchmark markers excluded), uploading them if new."""
        if prefix not in self._uploaded:
            for path in sorted(folder.iterdir()):
                if path.is_file() and not path.name.startswith("."):
                    self.bucket.client.upload_file(str(path), self.bucket.name, f"{prefix}/{path.name}")
            self._uploaded[prefix] = self.bucket.url(prefix)
        return self._uploaded[prefix]

    def stop(self) -> None:
        self._moto.stop()


_SERVER: list[LoopbackS3] = []


def loopback_s3() -> LoopbackS3:
    """The run's server, started on first use and stopped when the harness exits."""
    if not _SERVER:
        _SERVER.append(LoopbackS3())
        atexit.register(_SERVER[0].stop)
    return _SERVER[0]
