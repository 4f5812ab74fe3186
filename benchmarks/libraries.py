"""One way to build each library's dataset and loader, so every figure gives them the same settings.

Peers are imported only when asked for, so the CI smoke (ours only) never imports them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from benchmarks.workloads import BARE, LITDATA, MOSAICML, OURS

BATCH_SIZE = 256
# The loopback server's test credentials (tests/support/s3_server.py), repeated so that measuring
# processes never import moto: importing it hooks moto's stubber into every botocore client.
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def collate_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The one collate function every library's loader uses: ``{"id": int64 tensor, "data": [bytes]}``.

    torch's ``default_collate`` would treat litdata's ``memoryview`` payloads as sequences and build
    one tensor per byte (about 1,500 samples/s); ``bytes()`` is free for the others' ``bytes``.
    """
    import torch

    return {
        "id": torch.tensor([sample["id"] for sample in samples]),
        "data": [bytes(sample["data"]) for sample in samples],
    }


@dataclass(frozen=True)
class LoaderSpec:
    """What a measurement asks of a library: its data (local copy, or remote plus empty cache folder)."""

    library: str
    local: str
    remote: str | None = None
    shuffle: bool = False
    num_workers: int = 0
    batch_size: int = BATCH_SIZE
    num_canonical_nodes: int | None = 1
    endpoint_url: str | None = None


def make_loader(spec: LoaderSpec) -> tuple[Any, Any]:
    """(dataset, loader) for ``spec.library``; each library's own loader class where it has one."""
    builders = {OURS: _ours, MOSAICML: _mosaicml, LITDATA: _litdata, BARE: _bare}
    return builders[spec.library](spec)


def _mosaic_compatible(spec: LoaderSpec, dataset_class: Any, loader_class: Any) -> tuple[Any, Any]:
    """Ours and MosaicML's take the same arguments, by design."""
    dataset = dataset_class(
        remote=spec.remote,
        local=spec.local,
        batch_size=spec.batch_size,
        shuffle=spec.shuffle,
        num_canonical_nodes=spec.num_canonical_nodes,
    )
    return dataset, loader_class(
        dataset, batch_size=spec.batch_size, num_workers=spec.num_workers, collate_fn=collate_samples
    )


def _ours(spec: LoaderSpec) -> tuple[Any, Any]:
    from stream_plugin import StreamingDataLoader, StreamingDataset

    return _mosaic_compatible(spec, StreamingDataset, StreamingDataLoader)


def _mosaicml(spec: LoaderSpec) -> tuple[Any, Any]:
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    if int(os.environ.get("WORLD_SIZE", "1")) == 1:  # with several ranks it would need their process group
        clean_stale_shared_memory()
    return _mosaic_compatible(spec, StreamingDataset, StreamingDataLoader)


def _litdata(spec: LoaderSpec) -> tuple[Any, Any]:
    from litdata import StreamingDataLoader, StreamingDataset

    if spec.remote is None:
        dataset = StreamingDataset(input_dir=spec.local, shuffle=spec.shuffle)
    else:
        _allow_plain_http_for_litdata()
        dataset = StreamingDataset(
            input_dir=spec.remote,
            cache_dir=spec.local,
            shuffle=spec.shuffle,
            storage_options={"endpoint_url": spec.endpoint_url} if spec.endpoint_url else None,
        )
    return dataset, StreamingDataLoader(
        dataset, batch_size=spec.batch_size, num_workers=spec.num_workers, collate_fn=collate_samples
    )


def _allow_plain_http_for_litdata() -> None:
    """litdata fetches chunks with obstore, which refuses an ``http://`` endpoint (our loopback S3) unless
    its client options allow it; litdata passes no such option, so add it to the options it does pass."""
    from litdata.streaming import downloader

    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"


def _bare(spec: LoaderSpec) -> tuple[Any, Any]:
    from torch.utils.data import DataLoader

    from benchmarks.bare import BareMDSDataset

    dataset = BareMDSDataset(spec.local, batch_size=spec.batch_size, shuffle=spec.shuffle)
    return dataset, DataLoader(
        dataset, batch_size=spec.batch_size, num_workers=spec.num_workers, collate_fn=collate_samples
    )


def import_library(library: str, *, remote: bool = False) -> None:
    """Import a library (and torch) before any timer starts, so import time is never measured.

    With ``remote``, also the S3 client stack (boto3, and each library's S3 module), which every
    library imports lazily on first use; plain boto3's timings exclude its import too.
    """
    import torch.utils.data  # noqa: F401

    if library == OURS:
        # ``import stream_plugin`` defers the reading side (it needs torch); load it here, as the peers'
        # top-level imports do.
        import stream_plugin.reading.dataset  # noqa: F401
        import stream_plugin.reading.loader  # noqa: F401
    elif library == MOSAICML:
        import streaming  # noqa: F401
    elif library == LITDATA:
        import litdata  # noqa: F401
    if remote:
        import boto3.s3.transfer  # noqa: F401
        import boto3.session  # noqa: F401

        if library == OURS:
            import stream_plugin.storage.s3  # noqa: F401
        elif library == MOSAICML:
            import streaming.base.storage.download  # noqa: F401
        elif library == LITDATA:
            import litdata.streaming.downloader  # noqa: F401


def batch_length(batch: Any) -> int:
    return len(batch["id"])


def first_id(batch: Any) -> int:
    return int(batch["id"][0])


def s3_environment(endpoint_url: str) -> dict[str, str]:
    """Environment for a child that reads the loopback S3 server (every library reads these)."""
    return {
        **S3_CREDENTIALS,
        "S3_ENDPOINT_URL": endpoint_url,
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
