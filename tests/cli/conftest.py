from support.s3_server import s3_bucket, s3_server  # noqa: F401  (pytest fixtures)
