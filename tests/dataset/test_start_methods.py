"""DataLoader workers started by ``spawn`` and ``forkserver`` (Python 3.14's default on Linux, macOS's
``spawn``) give the batches forked workers give, and the same resume, on the fast path and torch's own.

The Hugging Face Trainer, Accelerate and DCP runs take a start method too (tests/transformers,
test_dcp_resume.py); CI runs Python 3.11, where fork is Linux's default, so these set it explicitly."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.datasets import write_ids
from support.resume import assert_resumes_identically, run_epochs

from stream_plugin import StreamingDataLoader, StreamingDataset

SAMPLES = 60
BATCH = 4
EPOCH = -(-SAMPLES // BATCH)


@pytest.fixture(scope="module")
def start_method_remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ids(tmp_path_factory.mktemp("start-methods") / "data", range(SAMPLES))


def loader(remote: Path, start_method: str, *, torch_iterator: bool = False) -> StreamingDataLoader:
    dataset = StreamingDataset(local=str(remote), shuffle=True, shuffle_seed=11, batch_size=BATCH)
    return StreamingDataLoader(
        dataset,
        batch_size=BATCH,
        num_workers=2,
        multiprocessing_context=start_method,
        torch_iterator=torch_iterator,
    )


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_not_forked_give_the_forked_batches(start_method_remote: Path, start_method: str) -> None:
    forked = run_epochs(loader(start_method_remote, "fork"), 2)
    assert run_epochs(loader(start_method_remote, start_method), 2) == forked
    assert run_epochs(loader(start_method_remote, start_method, torch_iterator=True), 1) == forked[:1]


def test_resume_across_start_methods(start_method_remote: Path) -> None:
    """Saved under forked workers, resumed under spawned ones, then under a fork server's."""
    makers = [
        lambda: loader(start_method_remote, "fork"),
        lambda: loader(start_method_remote, "spawn"),
        lambda: loader(start_method_remote, "forkserver"),
    ]
    assert_resumes_identically(makers, cuts=[(3, 5), (EPOCH - 1, 2)], epochs=2)
