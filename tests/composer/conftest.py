"""Composer integration tests: they run in .venv-composer (scripts/test) and skip elsewhere.

Shared, computed once per session: the tiny dataset and the uninterrupted reference run every
resumed run is compared with.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

SKIP_REASON = "Composer is not installed here; tests/composer run in .venv-composer (see scripts/test)"

# This folder is itself named "composer": where Composer is not installed, `import composer` would
# find it as a namespace package, so look for the real, installed package without importing anything.
_spec = importlib.util.find_spec("composer")
COMPOSER_INSTALLED = _spec is not None and _spec.origin is not None

if not COMPOSER_INSTALLED:

    class _SkippedModule(pytest.Module):
        """A test module reported as skipped without importing it (its imports need Composer)."""

        def _getobj(self) -> Any:
            pytest.skip(SKIP_REASON, allow_module_level=True)

    def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
        return _SkippedModule.from_parent(parent, path=module_path)

else:
    from composer_harness import EXAMPLE_DIR, NUM_SAMPLES

    if str(EXAMPLE_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLE_DIR))  # tiny_model, components, train: the example's modules

    from composer_inprocess import train_in_process
    from make_data import write_tiny_dataset

    @pytest.fixture(scope="session")
    def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
        """200 samples ``{id, x}`` in several small MDS shards (so the shard shuffle matters)."""
        folder = tmp_path_factory.mktemp("composer-data") / "tiny"
        return write_tiny_dataset(folder, NUM_SAMPLES, shard_bytes=1024)

    @pytest.fixture(scope="session")
    def reference_history(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
        """``[epoch, *sample ids]`` per global batch of one uninterrupted 3-epoch run on one rank."""
        root = tmp_path_factory.mktemp("composer-reference")
        return train_in_process(tiny_data, root, max_duration="3ep")
