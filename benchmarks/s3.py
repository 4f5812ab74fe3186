"""The loopback S3 endpoint for the cold-start and egress figures: the test suite's moto server.

One server (in the harness process) serves every remote figure of a run; each dataset copy is
uploaded once and shared by the figures that read it.
"""

from __future__ import annotations

import atexit
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_DIR

sys.path.insert(0, str(REPO_DIR / "tests"))

from support.s3_server import CREDENTIALS, S3Bucket, start_s3_server  # noqa: E402

__all__ = ["CREDENTIALS", "LoopbackS3", "loopback_s3"]


class ServedBytes:
    """WSGI middleware: body bytes of the GET responses, per access key id of the request's signature.

    Giving each simulated node its own (fake) access key makes the server count every node's egress,
    whatever client library it uses and whether or not it keeps the files afterwards.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.by_key: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        response = self.app(environ, start_response)
        if environ.get("REQUEST_METHOD") != "GET":
            return response
        match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        return _Counted(response, self, match.group(1) if match else "unsigned")

    def add(self, key: str, count: int) -> None:
        with self._lock:
            self.by_key[key] += count


class _Counted:
    """A WSGI response body that reports its size as it is sent."""

    def __init__(self, body: Iterable[bytes], counter: ServedBytes, key: str) -> None:
        self._body, self._counter, self._key = body, counter, key

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._body:
            self._counter.add(self._key, len(chunk))
            yield chunk

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()


_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


class LoopbackS3:
    """A moto server on 127.0.0.1 with one bucket; ``remote(folder, prefix)`` uploads a dataset once."""

    def __init__(self) -> None:
        self._moto, server = start_s3_server()
        wsgi_server = self._moto._server
        assert wsgi_server is not None
        self.served = ServedBytes(wsgi_server.app)
        wsgi_server.app = self.served  # the request handler looks the app up per request
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
