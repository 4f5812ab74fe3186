"""``gs://`` URLs, shared by the two GCS stores (the JSON API one and the HMAC one)."""

from __future__ import annotations

from urllib.parse import urlsplit

from stream_plugin.errors import ConfigError


def parse_gcs_url(url: str) -> tuple[str, str]:
    """Split ``gs://bucket/some/prefix`` into ``("bucket", "some/prefix")``."""
    parts = urlsplit(url)
    if parts.scheme != "gs" or not parts.netloc:
        raise ConfigError(f"Expected a GCS URL like 'gs://bucket/prefix', found {url!r}; add the bucket name.")
    return parts.netloc, parts.path.strip("/")
