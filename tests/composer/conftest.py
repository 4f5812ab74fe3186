"""Composer integration tests: they run in .venv-composer (scripts/test) and skip elsewhere.

Shared, computed once per session: the tiny dataset and the uninterrupted reference run every
resumed run is compared with.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# This folder is itself named "composer": where Composer is not installed, `import composer` would
# find it as a namespace package, so check for the real, installed package without importing.
_spec = importlib.util.find_spec("composer")
if _spec is None or _spec.origin is None:
    pytest.skip(
        "Composer is not installed in this environment; tests/composer run in .venv-composer (scripts/test)",
        allow_module_level=True,
    )

from composer_harness import EXAMPLE_DIR, NUM_SAMPLES  # noqa: E402

if str(EXAMPLE_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_DIR))  # tiny_model, components, train: the example's own modules

from composer_inprocess import train_in_process  # noqa: E402
from make_data import write_tiny_dataset  # noqa: E402


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 samples ``{id, x}`` in several small MDS shards (so the shard shuffle matters)."""
    return write_tiny_dataset(
        tmp_path_factory.mktemp("composer-data") / "tiny", NUM_SAMPLES, shard_bytes=1024
    )


@pytest.fixture(scope="session")
def reference_history(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    """``[epoch, *sample ids]`` per global batch of one uninterrupted 3-epoch run on one rank."""
    return train_in_process(tiny_data, tmp_path_factory.mktemp("composer-reference"), max_duration="3ep")
