"""Real llm-foundry 0.22.0 runs: a tiny ``mpt_causal_lm`` trained by llm-foundry's own trainer from a
text-config YAML (examples/llmfoundry/tiny_text.yaml) whose train_loader is ``name: stream_plugin``.

Preempted runs (SIGTERM to the training processes), rerun with the same command, must train exactly
the batches an uninterrupted run trains; on one rank, with exactly its losses too. Rerunning a finished
run exits 0 with ``stream_plugin_exit_if_complete`` in the callbacks.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("llmfoundry")

from composer_harness import (  # noqa: E402
    REPO,
    TESTS_DIR,
    Run,
    assert_same_history,
    in_epoch,
    launch,
    signal_ranks,
    wait_for_progress,
)
from llmfoundry_fixtures import MAX_SEQ_LEN, NUM_DOCUMENTS, write_datasets, write_tokenizer_folder  # noqa: E402

from stream_plugin import StreamingDataLoader, StreamingDataset  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "llmfoundry"
PREEMPTED = 128 + signal.SIGTERM
GLOBAL_BATCH = 8
BATCHES_PER_EPOCH = NUM_DOCUMENTS // GLOBAL_BATCH  # 25
EPOCHS = 2


def foundry_config(root: Path, data: Path, tokenizer: Path, *, delay_s: float = 0.0) -> Path:
    """The example YAML pointed at the test's data, cache and checkpoints, plus the batch recorder."""
    config: dict[str, Any] = yaml.safe_load((EXAMPLE / "tiny_text.yaml").read_text())
    config["variables"].update(
        data_local=str(data), data_cache=str(root / "cache"), tokenizer=str(tokenizer), run_name="foundry-test"
    )
    config["save_folder"] = str(root / "checkpoints")
    config["code_paths"] = [str(TESTS_DIR / "llmfoundry_recorder.py")]
    config["callbacks"]["token_sample_recorder"] = {"out": str(root / "history.json"), "delay_s": delay_s}
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_foundry(root: Path, config: Path, *, nproc: int = 1) -> Run:
    return launch(root, config, nproc=nproc, runner=EXAMPLE / "train.py")


def read_run(root: Path) -> dict[str, Any]:
    return json.loads((root / "history.json").read_text())


@pytest.fixture(scope="module")
def foundry_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llmfoundry-files")
    return {"tokenizer": write_tokenizer_folder(root / "tokenizer"), **write_datasets(root / "data")}


@pytest.fixture(scope="module")
def text_reference(foundry_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 2-epoch run on raw text; its folder (history.json, checkpoints)."""
    root = tmp_path_factory.mktemp("llmfoundry-reference")
    run = run_foundry(root, foundry_config(root, foundry_files["text"], foundry_files["tokenizer"]))
    assert run.wait() == 0, run.logs()
    return root


def test_llm_foundry_trains_mpt_on_raw_text_through_stream_plugin(text_reference: Path) -> None:
    history = read_run(text_reference)["history"]
    assert len(history) == EPOCHS * BATCHES_PER_EPOCH
    for epoch in range(EPOCHS):
        firsts = [token for batch in history[epoch * 25 : (epoch + 1) * 25] for token in batch[1:]]
        assert len(set(firsts)) == NUM_DOCUMENTS, f"epoch {epoch}: every document exactly once"


def test_sigterm_then_the_same_command_matches_the_uninterrupted_run_step_for_step(
    foundry_files: dict[str, Path], text_reference: Path, tmp_path: Path
) -> None:
    config = foundry_config(tmp_path, foundry_files["text"], foundry_files["tokenizer"], delay_s=0.1)
    first = run_foundry(tmp_path, config)
    signal_ranks(wait_for_progress(first, in_epoch(0, after_batch=9)), signal.SIGTERM)
    assert first.wait() == PREEMPTED, first.logs()
    second = run_foundry(tmp_path, config)
    assert second.wait() == 0, second.logs()
    resumed, reference = read_run(tmp_path), read_run(text_reference)
    assert_same_history(resumed["history"], reference["history"])
    assert resumed["losses"] == reference["losses"]


def test_rerunning_a_finished_run_exits_0_with_exit_if_complete(
    foundry_files: dict[str, Path], text_reference: Path
) -> None:
    # Without the callback Composer raises instead: test_composer_exit_if_complete.py shows it in process.
    again = run_foundry(text_reference, foundry_config(text_reference, foundry_files["text"], foundry_files["tokenizer"]))
    assert again.wait() == 0, again.logs()
    assert "is already complete" in again.logs()


def expected_token_history(data: Path, cache: Path) -> list[list[int]]:
    """``[epoch, *first tokens]`` per global batch of the same data order on one rank, read directly."""
    dataset = StreamingDataset(remote=str(data), local=str(cache), split="train", shuffle=True, shuffle_seed=1234)
    loader = StreamingDataLoader(dataset, batch_size=GLOBAL_BATCH, collate_fn=list)
    return [
        [epoch, *[int(sample["tokens"][0]) for sample in batch]] for epoch in range(EPOCHS) for batch in loader
    ]


def test_pretokenized_run_preempted_on_two_ranks_resumes_on_one(
    foundry_files: dict[str, Path], tmp_path: Path
) -> None:
    config = foundry_config(tmp_path, foundry_files["tokens"], foundry_files["tokenizer"], delay_s=0.1)
    first = run_foundry(tmp_path, config, nproc=2)
    signal_ranks(wait_for_progress(first, in_epoch(1, after_batch=4)), signal.SIGTERM)
    assert first.wait() == PREEMPTED, first.logs()
    second = run_foundry(tmp_path, config, nproc=1)
    assert second.wait() == 0, second.logs()
    history = read_run(tmp_path)["history"]
    expected = expected_token_history(foundry_files["tokens"], tmp_path / "expected-cache")
    assert_same_history(history, expected, what="the run resumed on one rank (first tokens per sample)")
    assert MAX_SEQ_LEN == 16  # the rows (20 tokens) were cut to max_seq_len: the model's context
