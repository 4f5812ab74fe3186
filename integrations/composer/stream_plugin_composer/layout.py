"""Which ranks read different samples under Composer's parallelism: tensor and sequence parallel ranks
share batches; only the data-parallel dims of Composer's DeviceMesh choose samples.

Composer builds its mesh in ``State`` (inside ``Trainer``), after the DataSpec exists, with the dims
``(data_parallel_replicate, data_parallel_shard, tensor_parallel)``, tensor parallel innermost: the
``tensor_parallel_degree`` consecutive ranks of one group read one data-parallel coordinate. So
``replication = tensor_parallel_degree`` is that layout, as MosaicML documents; the DataSpec builder
sets it from ``parallelism_config`` and ``data_parallel_check`` compares the dataset with the real mesh
before the first batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stream_plugin import (
    DATA_PARALLEL_DIM_NAMES,
    ConfigError,
    StreamingDataLoader,
    StreamingDataset,
    data_parallel_submesh,
    mesh_coordinates,
)
from stream_plugin.errors import LayoutError


def tensor_parallel_degree(parallelism_config: Any) -> int:
    """The ``tp`` degree of a Composer ``ParallelismConfig`` (or its dict form); 1 without tensor parallelism."""
    if parallelism_config is None:
        return 1
    tp = (
        parallelism_config.get("tp")
        if isinstance(parallelism_config, Mapping)
        else getattr(parallelism_config, "tp", None)
    )
    if tp is None:
        return 1
    key = "tensor_parallel_degree"
    degree = tp.get(key, 1) if isinstance(tp, Mapping) else getattr(tp, key, 1)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise ConfigError(
            f"parallelism_config.tp.tensor_parallel_degree: expected an int >= 1, found {degree!r}; set the "
            "number of ranks of one tensor-parallel group"
        )
    return degree


def shared_replication(given: int | None, degree: int, source: str) -> int | None:
    """``replication`` for a layout where ``degree`` consecutive ranks share samples (from ``source``);
    a ConfigError when the dataset section says otherwise."""
    if degree == 1:
        return given
    if given not in (None, degree):
        raise ConfigError(
            f"train_loader.dataset.replication: expected {degree} ({source} puts {degree} consecutive ranks "
            f"on one batch) or unset, found {given}; remove replication or make it {degree}"
        )
    return degree


def trainer_coordinates(device_mesh: Any) -> tuple[int, ...] | None:
    """Every rank's data-parallel coordinate by Composer's mesh (one collective), when the mesh has a
    dim that replicates (tensor parallel); None otherwise.

    Without such a dim Composer's view is "every rank reads its own data", but a model may still run
    sequence parallelism by itself (llm-foundry's ``seq_parallel_replication``): then only the dataset
    knows its replicas, and the loader checks them against each other (``check_layout=True``).
    """
    if device_mesh is None:
        return None
    names = tuple(device_mesh.mesh_dim_names or ())
    if all(name in DATA_PARALLEL_DIM_NAMES for name in names):
        return None
    return mesh_coordinates(data_parallel_submesh(device_mesh, where="Composer's device mesh"))


def check_dataset_layout(dataset: StreamingDataset, truth: Sequence[int]) -> None:
    """A LayoutError, before any batch, unless ``dataset`` groups the ranks as ``truth`` does."""
    ours = dataset.data_parallel.coordinates
    pairs = set(zip(truth, ours, strict=True))
    if len(pairs) == len(set(truth)) == len(set(ours)):
        return
    replication = len(truth) // max(len(set(truth)), 1)
    raise LayoutError(
        f"train_loader: expected the dataset to read {len(set(truth))} data-parallel coordinates, one per "
        f"group of {replication} ranks that Composer's device mesh trains on the same batch (coordinates "
        f"by rank {list(truth)}), found it reads {list(ours)} (replication {dataset.data_parallel.replication}); "
        f"set train_loader.dataset.replication: {replication} (the tensor_parallel_degree), or pass "
        "parallelism_config= to build_streaming_dataspec"
    )


def data_parallel_check(loader: Any, device_mesh: Any) -> None:
    """At the start of fit, under a mesh with tensor parallelism: the dataset's layout against the
    Trainer's, and the loader's first-batch digest check against it too (``check_layout``)."""
    if not isinstance(loader, StreamingDataLoader) or not isinstance(loader.dataset, StreamingDataset):
        return
    dataset = loader.dataset
    truth = trainer_coordinates(device_mesh)
    if truth is None:
        return
    check_dataset_layout(dataset, truth)
    loader.check_layout = truth
