"""Model parallelism: the DataModule reads the data-parallel dims of the strategy's DeviceMesh.

Real runs on 4 CPU processes (gloo): ``ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2)``
with a two-layer MLP split over each tensor-parallel pair, preempted by a real SIGTERM and resumed on
another layout (dp=1 x tp=2, 2 processes); and
plain DDP with a ``replication`` that contradicts it, stopped by the first-batch layout check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lightning_rig import Reference, assert_retraces, finish_process, merge_runs, read_records, start_process

from stream_plugin import data_parallel_dims
from stream_plugin.errors import ConfigError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RESUMED_STEPS = 30  # past the first epoch's end (25 steps) and its validation


def rank_steps(records: Path, tag: str, rank: int) -> list[dict[str, object]]:
    return [json.loads(line) for line in (records / f"{tag}-rank{rank}.jsonl").read_text().splitlines()]


def assert_tensor_parallel_pairs_share_batches(records: Path, tag: str, data_parallel: int) -> None:
    """Ranks (2d, 2d + 1) are the tensor-parallel pair of data-parallel coordinate d: the same batches;
    different coordinates, disjoint ones."""
    for coordinate in range(data_parallel):
        first, second = 2 * coordinate, 2 * coordinate + 1
        assert rank_steps(records, tag, first) == rank_steps(records, tag, second), (first, second)
    if data_parallel == 2:
        for zero, one in zip(rank_steps(records, tag, 0), rank_steps(records, tag, 2), strict=True):
            assert zero["step"] == one["step"] and not set(zero["ids"]) & set(one["ids"]), (zero, one)  # type: ignore[call-overload]


def test_model_parallel_tp2_preempted_and_resumed_on_another_layout_trains_the_plain_global_batches(
    reference: Reference, tmp_path: Path
) -> None:
    # dp=2 x tp=2 on 4 processes, global batch 8: each data-parallel coordinate reads 4 samples a step,
    # both ranks of its tensor-parallel pair the same 4. Every rank sends itself SIGTERM as step 9
    # starts; the ranks agree at every step, save last.ckpt and exit 143. The rerun resumes from it as
    # dp=1 x tp=2 on 2 processes: one pair reads all 8 samples of each global batch.
    preempted = reference.run_config(
        tmp_path,
        "preempted",
        devices=4,
        tensor_parallel=2,
        preemption=True,
        signal_at_step=9,
        check_interval_s=0.0,
    )
    status, output = finish_process(start_process(preempted), timeout=240)
    assert status == 143, output[-4000:]
    checkpoint = Path(preempted.checkpoints) / "last.ckpt"
    state = torch.load(checkpoint, weights_only=False)["StreamingDataModule"]["train"]
    assert (state["epoch"], state["sample_in_epoch"], state["epoch_batch_size"]) == (0, 10 * 8, 8)

    resumed = reference.run_config(
        tmp_path,
        "resumed",
        devices=2,
        tensor_parallel=2,
        ckpt_path=str(checkpoint),
        trainer_extra={"max_steps": RESUMED_STEPS},
    )
    status, output = finish_process(start_process(resumed), timeout=240)
    assert status == 0, output[-4000:]

    records = Path(preempted.records)
    assert_tensor_parallel_pairs_share_batches(records, "preempted", data_parallel=2)
    assert_tensor_parallel_pairs_share_batches(records, "resumed", data_parallel=1)
    first = read_records(records, "preempted", ranks=(0, 2))
    second = read_records(records, "resumed", ranks=(0,))
    assert (max(first), min(second), max(second)) == (9, 10, RESUMED_STEPS - 1)
    # The global batches (coordinate 0's samples, then coordinate 1's) are the uninterrupted run's, which
    # is the same on any number of data-parallel processes (test_lightning_ddp).
    expected = {step: entry for step, entry in reference.steps.items() if step < RESUMED_STEPS}
    assert_retraces(expected, first, second, what="the dp=2 x tp=2 run, preempted and resumed as dp=1 x tp=2")
    assert len(merge_runs(first, second)) == RESUMED_STEPS


def test_a_replication_that_contradicts_ddp_stops_at_the_first_batch(
    reference: Reference, tmp_path: Path
) -> None:
    # Under DDP every rank trains its own data; replication=2 makes both ranks read the same samples.
    config = reference.run_config(tmp_path, "replicated", devices=2, val=False, replication=2)
    status, output = finish_process(start_process(config), timeout=180)
    assert status != 0
    # The message docs/parallelism.md quotes.
    assert (
        "LayoutError: data-parallel layout: expected ranks 0 and 1 (data-parallel coordinates 0 and 1 of the "
        "training job) to get different samples, found the dataset gives both coordinate 0 (2 replicas per "
        "coordinate, from replication or the mesh it was given); pass the job's data-parallel mesh as "
        "data_parallel_mesh, or leave replication unset"
    ) in output, output[-4000:]
    assert not (Path(config.records) / "replicated-rank0.jsonl").exists()  # no step trained


@pytest.mark.parametrize(
    ("dims", "chosen", "expected"),
    [
        (("data_parallel", "tensor_parallel"), None, ("data_parallel",)),  # ModelParallelStrategy
        (("pp", "dp_replicate", "dp_shard", "cp", "tp"), None, ("dp_replicate", "dp_shard")),  # torchtitan
        (("data_parallel_shard", "tensor_parallel"), None, ("data_parallel_shard",)),  # Composer
        (("tp", "batch", "expert"), ["batch"], ("batch",)),
        (("tp", "dp", "expert"), ["expert", "dp"], ("dp", "expert")),  # in mesh order: row-major over the mesh
    ],
)
def test_the_data_parallel_dims_are_found_by_name_or_chosen(
    dims: tuple[str, ...], chosen: list[str] | None, expected: tuple[str, ...]
) -> None:
    assert data_parallel_dims(dims, chosen, where="the strategy's device mesh") == expected


@pytest.mark.parametrize(
    ("dims", "chosen", "message"),
    [
        (
            ("tp", "batch"),
            None,
            r"expected a data-parallel dim in the strategy's device mesh .*found dims \['tp', 'batch'\]; pass "
            r"data_parallel_dims=",
        ),
        (("tp", "batch"), ["dp"], r"data_parallel_dims: expected names of the strategy's device mesh dims"),
    ],
)
def test_a_mesh_without_a_recognisable_data_parallel_dim_names_the_option(
    dims: tuple[str, ...], chosen: list[str] | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        data_parallel_dims(dims, chosen, where="the strategy's device mesh")
