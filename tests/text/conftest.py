from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from support.text_data import train_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tokenizer.json of a word-level tokenizer trained offline on the fixture documents."""
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json")
