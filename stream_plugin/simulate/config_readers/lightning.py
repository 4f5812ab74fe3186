"""A LightningCLI YAML whose ``data`` is our ``StreamingDataModule``, read as plain mappings.

``data.init_args.train`` is the dataset; ``batch_size`` / ``global_batch_size``, ``num_workers`` and
``prefetch_factor`` come from ``init_args``; ``trainer`` gives the nodes, the devices and the duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.run_config import DATASET_KEYS, SPEC_ONLY_KEYS, RunConfig, as_mapping, check_keys

NAME = "lightning"  # RunConfig.kind, and the reader's name in the registry


def claims(document: Mapping[str, Any]) -> bool:
    """A LightningCLI file has ``data`` (the DataModule) or ``trainer`` at its top."""
    return "data" in document or "trainer" in document


def read(document: Mapping[str, Any], source: str) -> RunConfig:
    """The dataset, hardware and duration the file sets; ``source`` names the file in messages."""
    data = as_mapping(f"{source}: data", document.get("data"))
    arguments = as_mapping(f"{source}: data.init_args", data.get("init_args", data))
    if arguments.get("train") is None:
        raise ConfigError(
            f"{source}: expected data.init_args.train (StreamingDataModule's training data), found none; "
            "simulate reads the training split"
        )
    train = dict(as_mapping(f"{source}: data.init_args.train", arguments["train"]))
    check_keys(f"{source}: data.init_args.train", train, (*DATASET_KEYS, *SPEC_ONLY_KEYS))
    for key in SPEC_ONLY_KEYS:
        train.pop(key, None)
    for key in ("batch_size", "drop_last"):
        if arguments.get(key) is not None:
            train[key] = arguments[key]
    trainer = as_mapping(f"{source}: trainer", document.get("trainer") or {})
    hardware: dict[str, Any] = {}
    if trainer.get("num_nodes") is not None:
        hardware["nodes"] = trainer["num_nodes"]
    devices = trainer.get("devices")
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        hardware["devices_per_node"] = devices
    elif isinstance(devices, list) and devices:  # device ids
        hardware["devices_per_node"] = len(devices)
    for ours, theirs in (("workers", "num_workers"), ("prefetch_factor", "prefetch_factor")):
        if arguments.get(theirs) is not None:
            hardware[ours] = arguments[theirs]
    duration = None
    if trainer.get("max_steps") not in (None, -1):
        duration = f"{trainer['max_steps']}ba"
    elif trainer.get("max_epochs") not in (None, -1):
        duration = f"{trainer['max_epochs']}ep"
    return RunConfig(
        kind=NAME,
        source=source,
        dataset=train,
        global_batch_size=arguments.get("global_batch_size"),
        hardware=hardware,
        max_duration=duration,
    )


__all__ = ["NAME", "claims", "read"]
