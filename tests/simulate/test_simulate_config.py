"""``stream-plugin simulate``'s CONFIG files and options: what each shape becomes as a ``Workload`` and
``Hardware``, and the errors bad input gets."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from support.paths import FIXTURES_DIR
from support.s3_server import S3Bucket

from stream_plugin.errors import ConfigError
from stream_plugin.format.index import load_index
from stream_plugin.order.mixing import StreamWeight
from stream_plugin.reading.config import DatasetConfig
from stream_plugin.simulate import Hardware
from stream_plugin.simulate.config import (
    OPTIONS,
    apply_duration,
    build_hardware,
    build_run,
    load_workload,
    read_config,
    read_options,
    steps_per_epoch,
)

ZSTD = FIXTURES_DIR / "mds-zstd"  # 3 zstd shards of 128, 128 and 44 samples
SNAPPY = FIXTURES_DIR / "mds-snappy"
SYNTHETIC = {
    "synthetic": {
        "shards": 100,
        "samples_per_shard": "1k",
        "raw_bytes_per_shard": "64mb",
        "stored_bytes_per_shard": "16mb",
    },
    "batch_size": 8,
    "shuffle": True,
}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_dataset_folder_gives_every_shard_its_sizes_and_files_from_the_index() -> None:
    workload = load_workload(ZSTD, {"batch_size": 4})
    entries = load_index(ZSTD)
    assert workload.samples_per_shard.tolist() == [128, 128, 44]
    assert workload.stored_bytes.tolist() == [entry.zip_data.bytes for entry in entries if entry.zip_data]
    assert workload.raw_bytes.tolist() == [entry.raw_data.bytes for entry in entries]
    assert workload.footprint.tolist() == workload.raw_bytes.tolist()  # keep_zip is off
    assert workload.requests_per_shard.tolist() == [1, 1, 1]
    assert workload.config.batch_size == 4


def test_an_index_json_path_means_its_folder() -> None:
    assert load_workload(ZSTD / "index.json", {"batch_size": 4}).num_samples == 300


def test_keep_zip_adds_the_compressed_files_to_the_cache_footprint(tmp_path: Path) -> None:
    config = write(tmp_path / "d.json", json.dumps({"local": str(ZSTD), "keep_zip": True, "batch_size": 4}))
    workload = load_workload(config)
    assert (workload.footprint == workload.raw_bytes + workload.stored_bytes).all()


def test_a_remote_stream_is_sized_from_its_index_json_alone(s3_bucket: S3Bucket) -> None:
    s3_bucket.put("data/index.json", (ZSTD / "index.json").read_bytes())  # no shard is there
    workload = load_workload(
        {"remote": s3_bucket.url("data"), "storage_options": s3_bucket.store_options, "batch_size": 2}
    )
    assert workload.samples_per_shard.tolist() == [128, 128, 44]


def test_streams_keep_their_order_and_weights(tmp_path: Path) -> None:
    config = write(
        tmp_path / "mix.yaml",
        f"streams:\n  - local: {SNAPPY}\n    proportion: 0.25\n  - local: {ZSTD}\n    proportion: 0.75\n"
        "batch_size: 8\nepoch_size: 1000\n",
    )
    workload = load_workload(config)
    assert workload.shards_per_stream == (len(load_index(SNAPPY)), 3)
    assert workload.weights == (StreamWeight(proportion=0.25), StreamWeight(proportion=0.75))
    assert workload.config.epoch_size == 1000


def test_a_synthetic_shape_reads_human_sizes_and_counts() -> None:
    workload = load_workload(SYNTHETIC)
    assert workload.num_shards == 100
    assert workload.samples_per_shard[0] == 1000
    assert workload.raw_bytes[0] == 64 << 20
    assert workload.stored_bytes[0] == 16 << 20
    assert workload.config == DatasetConfig(batch_size=8, shuffle=True)


def test_unknown_dataset_keys_are_refused_with_the_valid_ones(tmp_path: Path) -> None:
    config = write(tmp_path / "d.yaml", f"local: {ZSTD}\nbatch_size: 4\nshufle: true\n")
    with pytest.raises(ConfigError, match=r"found unknown \['shufle'\]") as error:
        load_workload(config)
    assert "'shuffle_seed'" in str(error.value) and "'cache_limit'" in str(error.value)


def test_unknown_keys_of_a_stream_and_of_a_synthetic_shape_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"streams\[0\]: expected keys among .*found unknown \['weight'\]"):
        load_workload({"streams": [{"local": str(ZSTD), "weight": 2}], "batch_size": 4})
    shape = {**SYNTHETIC, "synthetic": {**SYNTHETIC["synthetic"], "shard_size": 3}}  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"synthetic: expected keys among .*found unknown \['shard_size'\]"):
        load_workload(shape)


def test_a_yaml_it_cannot_read_names_the_file_and_the_problem(tmp_path: Path) -> None:
    config = write(tmp_path / "bad.yaml", "local: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: expected YAML, found text it cannot read \(.*line"):
        read_config(config)
    with pytest.raises(ConfigError, match=r"expected a mapping of keys to values, found list"):
        read_config(write(tmp_path / "list.yaml", "- 1\n- 2\n"))


def test_a_missing_config_says_what_config_may_be(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected a YAML or JSON file, a dataset folder or index.json"):
        read_config(tmp_path / "nope.yaml")


def test_a_missing_batch_size_names_the_options() -> None:
    with pytest.raises(ConfigError, match=r"batch_size: expected the per-device batch size.*--batch-size"):
        load_workload({"local": str(ZSTD)})


def test_a_lightning_cli_yaml_gives_the_datamodule_data_and_the_trainer_hardware(tmp_path: Path) -> None:
    config = write(
        tmp_path / "fit.yaml",
        "trainer:\n  num_nodes: 2\n  devices: [0, 1, 2, 3]\n  max_epochs: 3\n"
        "data:\n  class_path: stream_plugin_lightning.StreamingDataModule\n  init_args:\n"
        "    global_batch_size: 64\n    num_workers: 2\n    drop_last: true\n"
        f"    train:\n      local: {ZSTD}\n      shuffle: true\n      transform: my.module.function\n"
        f"    val:\n      local: {ZSTD}\n",
    )
    workload, hardware = build_run(config, {})
    assert (hardware.nodes, hardware.devices_per_node, hardware.workers, hardware.epochs) == (2, 4, 2, 3)
    assert workload.config.batch_size == 8  # 64 over 2 x 4 ranks
    assert workload.config.shuffle and workload.config.drop_last


def test_an_llm_foundry_yaml_resolves_its_variables_and_names_streams(tmp_path: Path) -> None:
    config = write(
        tmp_path / "train.yaml",
        f"variables:\n  data: {FIXTURES_DIR}\n"
        "max_duration: 10ba\nglobal_train_batch_size: 16\n"
        "train_loader:\n  name: stream_plugin\n  num_workers: 3\n  dataset:\n"
        "    streams:\n      zstd:\n        local: ${variables.data}/mds-zstd\n"
        "      snappy:\n        local: ${variables.data}/mds-snappy\n"
        "    shuffle: true\n    max_seq_len: 16\n    eos_token_id: 2\n",
    )
    workload, hardware = build_run(config, {"nodes": 1, "devices_per_node": 2})
    assert workload.shards_per_stream == (3, len(load_index(SNAPPY)))
    assert workload.config.batch_size == 8
    assert (hardware.workers, hardware.prefetch_factor, hardware.max_steps) == (3, 2, 10)


def test_an_llm_foundry_yaml_with_another_loader_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "t.yaml", "train_loader:\n  name: text\n  dataset: {}\n")
    with pytest.raises(ConfigError, match=r"expected train_loader.name: stream_plugin .*found 'text'"):
        read_config(config)


def test_a_global_batch_the_ranks_do_not_divide_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"global_batch_size: expected a multiple of the 3 data-parallel"):
        build_run({"local": str(ZSTD)}, {"devices_per_node": 3, "global_batch_size": 8})


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    config = write(tmp_path / "d.yaml", f"local: {ZSTD}\nbatch_size: 4\ncache_limit: 1mb\n")
    workload, hardware = build_run(
        config, read_options({"batch_size": "2", "cache_limit": "2mb", "workers": "1", "nodes": "3"})
    )
    assert (workload.config.batch_size, workload.config.cache_limit) == (2, 2 << 20)
    assert (hardware.workers, hardware.nodes) == (1, 3)


def test_max_duration_in_steps_epochs_or_samples() -> None:
    workload = load_workload(SYNTHETIC)  # 100,000 samples
    hardware = Hardware(nodes=1, devices_per_node=2)  # global batch 16: 6,250 steps an epoch
    assert steps_per_epoch(workload, hardware) == 6250
    assert (
        apply_duration(hardware, workload, "2ep").epochs,
        apply_duration(hardware, workload, "2ep").max_steps,
    ) == (2, None)
    steps = apply_duration(hardware, workload, "7000ba")
    assert (steps.epochs, steps.max_steps) == (2, 7000)
    samples = apply_duration(hardware, workload, "161sp")
    assert (samples.epochs, samples.max_steps) == (1, 11)
    with pytest.raises(ConfigError, match=r"max_duration: expected steps, epochs or samples .*found '3tok'"):
        apply_duration(hardware, workload, "3tok")


def test_options_read_their_units() -> None:
    read = read_options(
        {
            "bandwidth": "10gbit",
            "latency": "30ms",
            "decompress_rate": "1.5gb",
            "rate_limit": "3500",
            "nodes": "2",
        }
    )
    assert read == {
        "bandwidth": 1.25e9,
        "latency": pytest.approx(0.03),
        "decompress_rate": 1.5 * 2**30,
        "rate_limit": 3500.0,
        "nodes": 2,
    }
    assert read_options({"bandwidth": "1e9"})["bandwidth"] == 1e9
    with pytest.raises(ConfigError, match=r"--latency: expected seconds such as 0.03 or 30ms, found 'soon'"):
        read_options({"latency": "soon"})


def test_every_hardware_field_has_an_option_with_a_unit() -> None:
    covered = {name for option in OPTIONS for name in option.hardware_fields}
    assert covered == {item.name for item in fields(Hardware)}
    assert all(option.unit for option in OPTIONS)


def test_impossible_hardware_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"bandwidth: expected a finite number > 0, found 0.0"):
        build_hardware(None, read_options({"bandwidth": "0"}))


def test_a_folder_copy_without_shards_still_sizes_the_dataset(tmp_path: Path) -> None:
    shutil.copy(ZSTD / "index.json", tmp_path / "index.json")
    workload = load_workload(f"file://{tmp_path}", {"batch_size": 1})
    assert np.array_equal(workload.samples_per_shard, [128, 128, 44])
