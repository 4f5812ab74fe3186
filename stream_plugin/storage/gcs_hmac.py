"""``GcsHmacStore``: ``gs://`` through GCS's S3-compatible XML API with HMAC keys (MosaicML's way).

MosaicML Streaming reads ``GCS_KEY`` / ``GCS_SECRET`` and talks to ``https://storage.googleapis.com``
with boto3; so do we, by running ``S3Store`` against that endpoint. ``endpoint_url`` points it at
another S3-compatible endpoint (the tests use moto).
"""

from __future__ import annotations

from stream_plugin.redaction import redact_url
from stream_plugin.storage.gcs_url import parse_gcs_url
from stream_plugin.storage.s3 import S3Store

GCS_XML_ENDPOINT = "https://storage.googleapis.com"


class GcsHmacStore(S3Store):
    """An ``S3Store`` serving a ``gs://bucket/prefix`` URL with HMAC keys; errors name the ``gs://`` URL."""

    def __init__(
        self, url: str, *, hmac_key_id: str, hmac_secret: str, endpoint_url: str | None = None
    ) -> None:
        bucket, prefix = parse_gcs_url(url)
        super().__init__(
            f"s3://{bucket}/{prefix}".rstrip("/"),
            endpoint_url=endpoint_url or GCS_XML_ENDPOINT,
            region="auto",
            unsigned=False,
            access_key_id=hmac_key_id,
            secret_access_key=hmac_secret,
            environ={},
        )
        self.url = url

    def __repr__(self) -> str:
        return f"GcsHmacStore({redact_url(self.url)!r}, endpoint_url={redact_url(self.endpoint_url or '') or None!r})"

    def _describe(self, full_key: str) -> str:
        return f"gs://{self.bucket}/{full_key} (S3-compatible API at {self.endpoint_url})"
