"""The registry of framework CONFIG readers: the core's two, and one an integration adds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.simulate.config import build_run, read_config
from stream_plugin.simulate.config_readers import (
    CONFIG_READERS,
    ConfigReader,
    reader_for,
    register_config_reader,
)
from stream_plugin.simulate.run_config import RunConfig


def test_the_core_reads_llm_foundry_then_lightning_without_their_packages() -> None:
    assert list(CONFIG_READERS) == ["llm-foundry", "lightning"]
    both = {"train_loader": {}, "trainer": {}}  # llm-foundry's key wins over Lightning's
    assert reader_for(both) is CONFIG_READERS["llm-foundry"]
    assert reader_for({"data": {}}) is CONFIG_READERS["lightning"]
    assert reader_for({"remote": "s3://b/d", "batch_size": 4}) is None


@pytest.fixture
def registered() -> Iterator[ConfigReader]:
    def read(document: Mapping[str, Any], source: str) -> RunConfig:
        arguments = document["my_framework"]
        return RunConfig(kind="my-framework", source=source, dataset=arguments, hardware={"nodes": 2})

    reader = ConfigReader("my-framework", lambda document: "my_framework" in document, read)
    register_config_reader(reader)
    yield reader
    del CONFIG_READERS[reader.name]


def test_a_registered_reader_reads_the_documents_it_claims(registered: ConfigReader) -> None:
    synthetic = {"shards": 4, "samples_per_shard": 10, "raw_bytes_per_shard": "1mb", "stored_bytes_per_shard": "1mb"}
    run = read_config({"my_framework": {"synthetic": synthetic, "batch_size": 5}})
    assert (run.kind, run.hardware) == ("my-framework", {"nodes": 2})
    assert reader_for({"my_framework": {}}) is registered


def test_a_reader_under_a_taken_name_is_refused(registered: ConfigReader) -> None:
    with pytest.raises(ConfigError, match=r"expected a new name, found 'lightning' already taken"):
        register_config_reader(ConfigReader("lightning", registered.claims, registered.read))
    with pytest.raises(ConfigError, match=r"found 'dataset' already taken"):
        register_config_reader(ConfigReader("dataset", registered.claims, registered.read))


def test_llm_foundry_divides_its_global_batch_over_every_rank_and_lightning_over_data_parallel() -> None:
    synthetic = {"shards": 4, "samples_per_shard": 64, "raw_bytes_per_shard": "1mb", "stored_bytes_per_shard": "1mb"}
    foundry = {
        "global_train_batch_size": 32,
        "train_loader": {"name": "stream_plugin", "dataset": {"local": "/unused", "replication": 2}},
    }
    lightning = {"data": {"init_args": {"global_batch_size": 32, "train": {"local": "/unused", "replication": 2}}}}
    options = {"nodes": 1, "devices_per_node": 4}
    for document, per_device in ((foundry, 8), (lightning, 16)):
        run = read_config(document)
        workload, _ = build_run(replace(run, synthetic=synthetic), options)  # sized without reading /unused
        assert workload.config.batch_size == per_device, run.source


def test_an_llm_foundry_yaml_with_token_blocks_is_refused_with_what_to_simulate_instead() -> None:
    loader = {"name": "stream_plugin", "dataset": {"local": "/unused", "max_seq_len": 2048, "token_blocks": True}}
    with pytest.raises(ConfigError, match=r"token_blocks: True; token blocks .* are not simulated"):
        read_config({"train_loader": loader, "global_train_batch_size": 8})
    loader["dataset"]["token_blocks"] = False  # the plain text dataset: read as before
    assert read_config({"train_loader": loader, "global_train_batch_size": 8}).kind == "llm-foundry"
