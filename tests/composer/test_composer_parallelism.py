"""Tensor and sequence parallelism under Composer: replicas share batches, data-parallel ranks do not.

Composer 0.32 cannot run tensor parallelism on CPU: TP requires FSDP ("Tensor parallelism (TP)
currently requires FSDP to be enabled"), FSDP1's wrap calls ``torch.cuda.current_device()`` ("Found no
NVIDIA driver on your system"), and FSDP2 with TP fails Composer's own check that the optimizer holds
the model's parameters (TP has already replaced them with DTensors). So the 4-rank run builds Composer's
own ``State`` with that ``ParallelismConfig`` (the real gloo DeviceMesh the Trainer would use) and runs
our DataSpec and ``ExactDataResumption`` against it (``parallel_layout_script.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from composer_harness import launch
from support.text_data import write_tokens

from stream_plugin import ConfigError
from stream_plugin_composer import build_streaming_dataspec
from stream_plugin_composer.layout import shared_replication, tensor_parallel_degree

SCRIPT = Path(__file__).resolve().parent / "parallel_layout_script.py"
BATCHES = 3


def first_batches(spec: Any, convert: Any) -> list[Any]:
    batches = []
    for batch in spec.dataloader:
        batches.append(convert(batch))
        if len(batches) == BATCHES:
            return batches
    return batches


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tensor_and_sequence_parallel_replicas_share_batches_on_4_gloo_ranks(tiny_data: Path, tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens", range(64), length=12)
    config = {
        "data": str(tiny_data),
        "cache": str(tmp_path / "cache"),
        "tokens": str(tokens),
        "tokens_cache": str(tmp_path / "tokens-cache"),
        "out": str(tmp_path),
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = launch(tmp_path, tmp_path / "config.json", nproc=4, runner=SCRIPT)
    assert run.wait() == 0, run.logs()
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(4)]
    assert results[0]["mesh"] == ["data_parallel_shard", "tensor_parallel"]

    # parallelism_config with tensor_parallel_degree=2: ranks (0, 1) and (2, 3) share every batch, and
    # the global batches are a plain data-parallel run's of size 2 (the same on one process).
    tp = [result["tensor_parallel"] for result in results]
    assert tp[0]["batches"] == tp[1]["batches"] and tp[2]["batches"] == tp[3]["batches"]
    plain = build_streaming_dataspec(
        device_batch_size=4,
        dataset={"remote": str(tiny_data), "local": str(tmp_path / "plain"), "shuffle": True, "shuffle_seed": 7},
    )
    expected = first_batches(plain, lambda batch: [int(value) for value in batch["id"]])
    assert [zero + one for zero, one in zip(tp[0]["batches"], tp[2]["batches"], strict=True)] == expected
    # Composer's clock counts every rank's batch; the resume state counts each sample once.
    assert {result["resume_sample_in_epoch"] for result in tp} == {BATCHES * 4}

    # Without parallelism_config the DataSpec gives every rank its own data: stopped before any batch.
    assert results[0]["unaware"] == (
        "train_loader: expected the dataset to read 2 data-parallel coordinates, one per group of 2 ranks "
        "that Composer's device mesh trains on the same batch (coordinates by rank [0, 0, 1, 1]), found it "
        "reads [0, 1, 2, 3] (replication 1); set train_loader.dataset.replication: 2 (the "
        "tensor_parallel_degree), or pass parallelism_config= to build_streaming_dataspec"
    )

    # seq_parallel_replication: 2 with device_batch_size 0.5: one sample per sequence-parallel pair.
    sp = [result["sequence_parallel"] for result in results]
    assert {result["replication"] for result in sp} == {2}
    assert sp[0]["batches"] == sp[1]["batches"] and sp[2]["batches"] == sp[3]["batches"]
    text = {"remote": str(tokens), "local": str(tmp_path / "plain-tokens"), "max_seq_len": 8}
    plain_text = build_streaming_dataspec(device_batch_size=2, dataset=text)
    expected_rows = first_batches(plain_text, lambda batch: batch["input_ids"].tolist())
    assert [zero + one for zero, one in zip(sp[0]["batches"], sp[2]["batches"], strict=True)] == expected_rows


@pytest.mark.parametrize(
    ("config", "degree"),
    [
        (None, 1),
        ({"fsdp": {}}, 1),
        ({"fsdp": {}, "tp": {"tensor_parallel_degree": 4}}, 4),
    ],
)
def test_the_tensor_parallel_degree_is_read_from_the_parallelism_config(config: Any, degree: int) -> None:
    assert tensor_parallel_degree(config) == degree


def test_the_tensor_parallel_degree_of_a_composer_parallelism_config_object() -> None:
    from composer.utils.parallelism import FSDPConfig, ParallelismConfig, TPConfig

    config = ParallelismConfig(fsdp=FSDPConfig(), tp=TPConfig(tensor_parallel_degree=2))
    assert tensor_parallel_degree(config) == 2


def test_a_replication_that_contradicts_the_parallelism_is_refused() -> None:
    assert shared_replication(None, 2, "parallelism_config.tp") == 2
    assert shared_replication(3, 1, "parallelism_config.tp") == 3
    with pytest.raises(
        ConfigError,
        match=r"train_loader.dataset.replication: expected 2 \(seq_parallel_replication puts 2 consecutive "
        r"ranks on one batch\) or unset, found 4; remove replication or make it 2",
    ):
        shared_replication(4, 2, "seq_parallel_replication")
