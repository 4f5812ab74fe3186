"""Readers of the training frameworks' YAML for ``stream-plugin simulate``: a registry keyed by name.

A reader says whether a CONFIG document is its framework's (``claims``) and turns it into a
``RunConfig`` (``read``). ``simulate.config`` asks the registry and knows no framework itself. The core
keeps one small reader per framework it documents (Lightning's CLI, llm-foundry), which parse plain
mappings and import no framework, so ``stream-plugin simulate fit.yaml`` works without the
integrations installed; an integration (or a user) adds another with ``register_config_reader``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.config_readers import lightning, llm_foundry
from stream_plugin.simulate.run_config import RunConfig


@dataclass(frozen=True)
class ConfigReader:
    """One framework's CONFIG: whether a document is its (by its top-level keys) and how to read it."""

    name: str  # RunConfig.kind of what it reads
    claims: Callable[[Mapping[str, Any]], bool]  # the document (``${...}`` resolved) -> is it ours
    read: Callable[[Mapping[str, Any], str], RunConfig]  # (document, source for messages) -> RunConfig


# Asked in this order: the first reader that claims a document reads it (llm-foundry's ``train_loader``
# before Lightning's ``data`` / ``trainer``).
CONFIG_READERS: dict[str, ConfigReader] = {}


def register_config_reader(reader: ConfigReader) -> None:
    """Add ``reader`` after those registered; a second reader under the same name is refused."""
    if reader.name in CONFIG_READERS or reader.name in ("dataset", "synthetic"):
        taken = sorted({*CONFIG_READERS, "dataset", "synthetic"})
        raise ConfigError(
            f"register_config_reader: expected a new name, found {reader.name!r} already taken (taken: {taken}); "
            "give the reader another name"
        )
    CONFIG_READERS[reader.name] = reader


def reader_for(document: Mapping[str, Any]) -> ConfigReader | None:
    """The first registered reader that claims ``document``; None: it is the dataset's own arguments."""
    return next((reader for reader in CONFIG_READERS.values() if reader.claims(document)), None)


register_config_reader(ConfigReader(llm_foundry.NAME, llm_foundry.claims, llm_foundry.read))
register_config_reader(ConfigReader(lightning.NAME, lightning.claims, lightning.read))

__all__ = ["CONFIG_READERS", "ConfigReader", "reader_for", "register_config_reader"]
