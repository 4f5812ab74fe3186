"""A plain ``transformers.Trainer`` over a ``StreamingDataset`` on several ranks is refused, not trained
on a fraction of the data: Accelerate dispatches or shards what we already split by rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_rig import write_dataset
from hf_runs import run_ranks

from stream_plugin import StreamingDataset, World
from stream_plugin.errors import ConfigError


@pytest.mark.slow
@pytest.mark.parametrize(("dispatch", "splitter"), [(None, "DataLoaderDispatcher"), (False, "IterableDatasetShard")])
def test_a_plain_trainer_on_two_ranks_refuses_to_train(tmp_path: Path, dispatch: bool | None, splitter: str) -> None:
    write_dataset(tmp_path / "train", 64)
    config = {"trainer": "plain", "data": str(tmp_path / "train"), "output_dir": str(tmp_path / "out"), "batch_size": 4, "max_steps": 4}
    if dispatch is not None:
        config["dispatch_batches"] = dispatch
    run = run_ranks(config, world=2, timeout=240)
    assert all(code != 0 for code in run.codes), run.outputs
    for output in run.outputs:
        assert f"found Accelerate's {splitter} reading it" in output
        assert "use stream_plugin_transformers.StreamingTrainer" in output
    assert run.steps == {}  # no step trained


def test_accelerates_shard_wrapper_is_refused_when_it_sets_the_epoch(tmp_path: Path) -> None:
    from accelerate.data_loader import IterableDatasetShard

    write_dataset(tmp_path / "train", 16)
    dataset = StreamingDataset(local=str(tmp_path / "train"), batch_size=2, world=World(rank=0, world_size=2, local_rank=0, local_world_size=2))
    shard = IterableDatasetShard(dataset, batch_size=2, num_processes=2, process_index=0)
    with pytest.raises(ConfigError, match="found Accelerate's IterableDatasetShard reading it"):
        shard.set_epoch(1)


def test_one_process_under_accelerate_is_not_refused(tmp_path: Path) -> None:
    from accelerate.data_loader import IterableDatasetShard

    write_dataset(tmp_path / "train", 16)
    dataset = StreamingDataset(local=str(tmp_path / "train"), batch_size=2, world=World())
    IterableDatasetShard(dataset, batch_size=2, num_processes=1, process_index=0).set_epoch(1)
    assert dataset.next_epoch == 1
