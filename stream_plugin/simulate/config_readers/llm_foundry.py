"""An llm-foundry YAML whose ``train_loader`` is ours (``name: stream_plugin``), read as plain mappings.

``train_loader.dataset`` is the dataset (streams named in a mapping; the text keys, which change
samples and not downloads, left out); ``num_workers`` and ``prefetch_factor`` from the loader;
``global_train_batch_size`` over every rank, ``device_train_batch_size`` and ``max_duration``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.run_config import DATASET_KEYS, SPEC_ONLY_KEYS, RunConfig, as_mapping, check_keys

NAME = "llm-foundry"  # RunConfig.kind, and the reader's name in the registry


def claims(document: Mapping[str, Any]) -> bool:
    """An llm-foundry file has ``train_loader`` at its top."""
    return "train_loader" in document


def read(document: Mapping[str, Any], source: str) -> RunConfig:
    """The dataset, hardware and duration the file sets; ``source`` names the file in messages."""
    loader = as_mapping(f"{source}: train_loader", document["train_loader"])
    if loader.get("name") != "stream_plugin":
        raise ConfigError(
            f"{source}: expected train_loader.name: stream_plugin (our loader), found {loader.get('name')!r}; "
            "change the name (every dataset key keeps its meaning)"
        )
    dataset = dict(as_mapping(f"{source}: train_loader.dataset", loader.get("dataset")))
    if dataset.get("token_blocks"):
        raise ConfigError(
            f"{source}: expected a dataset of stored samples, found train_loader.dataset.token_blocks: "
            f"{dataset['token_blocks']!r}; token blocks (docs/token-blocks.md) are not simulated: their "
            "count comes from the tokens of each document, which the index does not give. Simulate the "
            "YAML without token_blocks for the shards' downloads, or set synthetic samples per shard to "
            "the blocks per shard"
        )
    dataset.pop("token_blocks", None)  # false: the plain text dataset
    # Read from the text dataset's signature (which imports torch): only for an llm-foundry CONFIG, so the
    # CLI starts without torch.
    from stream_plugin.text.loader_keys import TEXT_KEYS

    check_keys(f"{source}: train_loader.dataset", dataset, (*DATASET_KEYS, *SPEC_ONLY_KEYS, *TEXT_KEYS))
    for key in (*SPEC_ONLY_KEYS, *TEXT_KEYS):
        dataset.pop(key, None)
    if isinstance(dataset.get("streams"), Mapping):  # llm-foundry names its streams
        dataset["streams"] = list(dataset["streams"].values())
    if loader.get("drop_last") is not None:
        dataset["drop_last"] = loader["drop_last"]
    if document.get("device_train_batch_size") is not None:
        dataset["batch_size"] = document["device_train_batch_size"]
    hardware: dict[str, Any] = {}
    for ours, theirs in (("workers", "num_workers"), ("prefetch_factor", "prefetch_factor")):
        if loader.get(theirs) is not None:
            hardware[ours] = loader[theirs]
    if loader.get("num_workers") and loader.get("prefetch_factor") is None:
        hardware["prefetch_factor"] = 2  # llm-foundry's default, and torch's
    duration = document.get("max_duration")
    return RunConfig(
        kind=NAME,
        source=source,
        dataset=dataset,
        global_batch_size=document.get("global_train_batch_size"),
        hardware=hardware,
        max_duration=None if duration is None else str(duration),
        global_batch_over="world",  # llm-foundry divides its global batch by the world size
    )


__all__ = ["NAME", "claims", "read"]
