"""The node's forecast of a pass is planned by one process of the node; the others read its file."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np

from stream_plugin.reading.shared_forecast import SharedSpans

NUM_SHARDS = 50


def _spans() -> tuple[np.ndarray, np.ndarray]:
    first = np.arange(NUM_SHARDS, dtype=np.int64) * 3
    return first, first + 2


def _get_counting(local: str, plans: str, key: int, results: str) -> None:
    def plan() -> tuple[np.ndarray, np.ndarray]:
        with open(plans, "a") as log:
            log.write("planned\n")
        return _spans()

    first, last = SharedSpans(local, "dataset").get((key,), NUM_SHARDS, plan)
    np.save(f"{results}.{multiprocessing.current_process().pid}.npy", np.stack([first, last]))


def test_the_processes_of_a_node_plan_a_pass_once(tmp_path: Path) -> None:
    plans = tmp_path / "plans.log"
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_get_counting, args=(str(tmp_path / "local"), str(plans), 7, str(tmp_path / "r")))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert plans.read_text().count("planned") == 1
    results = sorted(tmp_path.glob("r.*.npy"))
    assert len(results) == 4
    for result in results:
        np.testing.assert_array_equal(np.load(result), np.stack(_spans()))


def test_another_pass_or_dataset_is_planned_again(tmp_path: Path) -> None:
    calls: list[str] = []

    def plan() -> tuple[np.ndarray, np.ndarray]:
        calls.append("planned")
        return _spans()

    SharedSpans(tmp_path, "dataset").get((1,), NUM_SHARDS, plan)
    SharedSpans(tmp_path, "dataset").get((1,), NUM_SHARDS, plan)  # read from the file
    SharedSpans(tmp_path, "dataset").get((2,), NUM_SHARDS, plan)  # another pass
    SharedSpans(tmp_path, "other-dataset").get((1,), NUM_SHARDS, plan)  # another table or order
    assert len(calls) == 3


def test_a_file_cut_short_is_planned_again(tmp_path: Path) -> None:
    calls: list[str] = []

    def plan() -> tuple[np.ndarray, np.ndarray]:
        calls.append("planned")
        return _spans()

    SharedSpans(tmp_path, "dataset").get((1,), NUM_SHARDS, plan)
    (saved,) = (tmp_path / ".stream_plugin" / "forecast").glob("*.npy")
    saved.write_bytes(saved.read_bytes()[:100])
    first, last = SharedSpans(tmp_path, "dataset").get((1,), NUM_SHARDS, plan)
    assert len(calls) == 2
    np.testing.assert_array_equal(first, _spans()[0])


def test_the_identity_names_the_shards_the_epoch_sizes_and_the_order() -> None:
    counts = np.full(10, 100, np.int64)
    base = SharedSpans.identity_of(counts, np.array([1000]), ("shuffle", True))
    assert base == SharedSpans.identity_of(counts.copy(), np.array([1000]), ("shuffle", True))
    changed = counts.copy()
    changed[3] = 99
    assert base != SharedSpans.identity_of(changed, np.array([1000]), ("shuffle", True))
    assert base != SharedSpans.identity_of(counts, np.array([500]), ("shuffle", True))
    assert base != SharedSpans.identity_of(counts, np.array([1000]), ("shuffle", False))
