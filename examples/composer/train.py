"""Train a Composer model from an llm-foundry-style YAML file, without llm-foundry.

    python examples/composer/train.py examples/composer/tiny.yaml [key.sub=value ...]
    composer -n 2 examples/composer/train.py examples/composer/tiny.yaml

Overrides are YAML values (``save_interval=1ep``, ``train_loader.num_workers=0``). With ``run_name``,
``save_folder`` and ``autoresume: true``, running the same command again resumes from the latest
checkpoint, and a finished run reports "already complete" and exits 0. SIGTERM makes the run finish
its batch, checkpoint and exit 143 (``PreemptionCheckpoint``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from components import build_callbacks, build_model, build_optimizer, build_train_loader
from composer import Trainer
from composer.utils import dist, format_name_with_dist

from stream_plugin.errors import ConfigError
from stream_plugin_composer import run_is_complete, set_aside_unfinished_checkpoints

# The keys this runner understands (a subset of llm-foundry's train config).
KNOWN_KEYS = {
    "run_name",
    "seed",
    "device",
    "max_duration",
    "global_train_batch_size",
    "device_train_microbatch_size",
    "save_folder",
    "save_interval",
    "save_num_checkpoints_to_keep",
    "autoresume",
    "model",
    "optimizer",
    "train_loader",
    "callbacks",
}
REQUIRED_KEYS = ("max_duration", "global_train_batch_size", "model", "optimizer", "train_loader")


def apply_override(config: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in ``config``; the value is parsed as YAML (``3``, ``1ep``, ``true``)."""
    key, separator, text = override.partition("=")
    if not separator or not key:
        raise ConfigError(f"override: expected key.path=value, found {override!r}")
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: expected {part!r} to be a mapping, found {node!r}")
    node[leaf] = yaml.safe_load(text)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The YAML file as a dict, with ``overrides`` applied, checked for unknown and missing keys."""
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a YAML mapping at the top level, found {type(config).__name__}")
    for override in overrides:
        apply_override(config, override)
    unknown = sorted(set(config) - KNOWN_KEYS)
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if unknown or missing:
        raise ConfigError(
            f"{path}: expected keys among {sorted(KNOWN_KEYS)} including {list(REQUIRED_KEYS)}, found "
            f"unknown {unknown} and missing {missing}; fix the config"
        )
    return config


def device_batch_size(global_batch_size: Any, world_size: int) -> int:
    if not isinstance(global_batch_size, int) or global_batch_size % world_size:
        raise ConfigError(
            f"global_train_batch_size: expected an int divisible by the number of ranks {world_size}, "
            f"found {global_batch_size!r}; the sample order is defined per global batch"
        )
    return global_batch_size // world_size


def _set_aside_unfinished(config: Mapping[str, Any]) -> None:
    folder, run_name = config.get("save_folder"), config.get("run_name")
    if not (config.get("autoresume") and folder and run_name) or "://" in str(folder):
        return  # Composer itself reports a missing run_name; remote folders are left alone
    if dist.get_global_rank() == 0:
        set_aside_unfinished_checkpoints(format_name_with_dist(str(folder), str(run_name)))


def train(config: Mapping[str, Any]) -> int:
    """Build the trainer (autoresuming if asked) and train; 0 when done or already complete."""
    world_size = dist.get_world_size()
    batch_size = device_batch_size(config["global_train_batch_size"], world_size)
    train_dataloader = build_train_loader(config["train_loader"], batch_size)
    model = build_model(config["model"])
    optimizer = build_optimizer(config["optimizer"], model)
    _set_aside_unfinished(config)
    trainer = Trainer(
        model=model,
        train_dataloader=train_dataloader,
        optimizers=optimizer,
        max_duration=config["max_duration"],
        callbacks=build_callbacks(config.get("callbacks")),
        run_name=config.get("run_name"),
        seed=config.get("seed"),
        device=config.get("device"),
        device_train_microbatch_size=config.get("device_train_microbatch_size"),
        save_folder=config.get("save_folder"),
        save_interval=config.get("save_interval", "1ep"),
        save_num_checkpoints_to_keep=config.get("save_num_checkpoints_to_keep", -1),
        autoresume=bool(config.get("autoresume", False)),
        progress_bar=False,
        log_to_console=False,
    )
    try:
        if run_is_complete(trainer.state):
            timestamp = trainer.state.timestamp
            print(
                f"run {trainer.state.run_name!r} is already complete (epoch {int(timestamp.epoch)}, batch "
                f"{int(timestamp.batch)}; max_duration {config['max_duration']}): nothing to do",
                flush=True,  # before any forked helper process could inherit (and re-flush) the buffer
            )
            return 0
        trainer.fit()
    finally:
        trainer.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a Composer model from an llm-foundry-style YAML.")
    parser.add_argument("config", help="path to the YAML run config")
    parser.add_argument("overrides", nargs="*", help="key.path=value (a YAML value)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return train(config)


if __name__ == "__main__":
    sys.exit(main())
