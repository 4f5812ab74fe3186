"""HTTP byte ranges for the loopback servers: ``Range: bytes=a-b`` parsed, and a static file handler
that answers it with 206 (the standard library's ``SimpleHTTPRequestHandler`` ignores ``Range``)."""

from __future__ import annotations

import http.server
import os
import re

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``[start, end)`` that ``header`` asks for of an object of ``size`` bytes; None without a header.

    One range only (what the stores send); ``bytes=-n`` is the last ``n`` bytes. A range that starts
    past the end raises ``ValueError`` (answer 416).
    """
    if not header:
        return None
    found = _RANGE.match(header.strip())
    if found is None or found.group(1) == found.group(2) == "":
        raise ValueError(f"unsupported Range {header!r}")
    first, last = found.group(1), found.group(2)
    if first == "":
        return max(0, size - int(last)), size
    start = int(first)
    end = size if last == "" else min(size, int(last) + 1)
    if start >= size or end <= start:
        raise ValueError(f"Range {header!r} outside an object of {size} bytes")
    return start, end


class RangedFileHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder (``directory=``) with GET/HEAD; a GET with ``Range`` gets 206 and those bytes."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (stdlib signature)
        pass

    def do_GET(self) -> None:  # noqa: N802  (stdlib name)
        path = self.translate_path(self.path)
        if "Range" not in self.headers or not os.path.isfile(path):
            super().do_GET()
            return
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            wanted = parse_range(self.headers["Range"], len(data))
        except ValueError:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        assert wanted is not None
        start, end = wanted
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        self.end_headers()
        self.wfile.write(data[start:end])
