"""Build the parts of a run from the YAML sections, resolving names the way llm-foundry does.

``train_loader.name`` and the ``callbacks`` keys are looked up in the entry-point groups
``llmfoundry_dataloaders`` and ``llmfoundry_callbacks`` (where llm-foundry's catalogue registries look
too), or imported when written as ``"package.module:attribute"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

import torch
from composer import Callback
from composer.core import DataSpec
from composer.models import ComposerModel
from composer.optim import DecoupledAdamW, DecoupledSGDW

from stream_plugin.errors import ConfigError
from stream_plugin_composer import ExactDataResumption, PreemptionCheckpoint

DATALOADERS = "llmfoundry_dataloaders"
CALLBACKS = "llmfoundry_callbacks"
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "decoupled_sgdw": DecoupledSGDW,
    "decoupled_adamw": DecoupledAdamW,
    "sgd": torch.optim.SGD,
    "adamw": torch.optim.AdamW,
}


def resolve(group: str, name: str) -> Any:
    """What ``name`` is registered as in entry-point ``group``, or the object ``"module:attribute"`` names."""
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            return getattr(import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise ConfigError(
                f"{group}: expected {name!r} to be importable as module:attribute, found {error}; check "
                "PYTHONPATH and the spelling"
            ) from error
    found = {point.name: point for point in entry_points(group=group)}
    if name not in found:
        raise ConfigError(
            f"{group}: expected a registered name among {sorted(found)} or a 'module:attribute', found "
            f"{name!r}; install the package that registers it, or fix the name"
        )
    return found[name].load()


def _split_name(section: str, config: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(config, Mapping) or not isinstance(config.get("name"), str):
        raise ConfigError(f"{section}: expected a mapping with a 'name' string, found {config!r}")
    arguments = dict(config)
    return arguments.pop("name"), arguments


def build_train_loader(config: Any, device_batch_size: int) -> DataSpec:
    """Call the registered builder the way llm-foundry's ``build_dataloader`` does."""
    name, arguments = _split_name("train_loader", config)
    builder = resolve(DATALOADERS, name)
    built = builder(tokenizer=None, device_batch_size=device_batch_size, **arguments)
    if not isinstance(built, DataSpec):
        raise ConfigError(
            f"train_loader: expected {name!r} to return a composer DataSpec, found {type(built).__name__}"
        )
    return built


def build_model(config: Any) -> ComposerModel:
    """``model: {name: "module:factory", **factory arguments}``."""
    name, arguments = _split_name("model", config)
    model = resolve("model", name if ":" in name else f"{name}:build_model")(**arguments)
    if not isinstance(model, ComposerModel):
        raise ConfigError(f"model: expected {name!r} to build a ComposerModel, found {type(model).__name__}")
    return model


def build_optimizer(config: Any, model: ComposerModel) -> torch.optim.Optimizer:
    """``optimizer: {name: decoupled_sgdw | decoupled_adamw | sgd | adamw, **arguments}``."""
    name, arguments = _split_name("optimizer", config)
    if name not in OPTIMIZERS:
        raise ConfigError(f"optimizer.name: expected one of {sorted(OPTIMIZERS)}, found {name!r}")
    return OPTIMIZERS[name](model.parameters(), **arguments)


def build_callbacks(config: Any) -> list[Callback]:
    """``callbacks: {name: arguments}``; adds the two stream_plugin callbacks when they are missing.

    Exact resumption and preemption handling are what this runner is for, so they are always on.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"callbacks: expected a mapping of name to arguments, found {type(config).__name__}"
        )
    callbacks: list[Callback] = []
    for name, arguments in config.items():
        cls = resolve(CALLBACKS, str(name))
        callback = cls(**(arguments or {}))
        if not isinstance(callback, Callback):
            raise ConfigError(
                f"callbacks.{name}: expected a composer Callback, found {type(callback).__name__}"
            )
        callbacks.append(callback)
    for required in (ExactDataResumption, PreemptionCheckpoint):
        if not any(isinstance(callback, required) for callback in callbacks):
            callbacks.append(required())
    return callbacks
