"""Root test configuration: makes the shared rigs in tests/support importable."""

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from support.s3_server import s3_bucket, s3_server  # noqa: E402, F401  (one moto server per session)

# The GCS and Azure rigs need the [gcs] and [azure] SDKs. The main environment (every test but
# tests/composer) always has them; the Composer environment, which runs tests/composer only, does not.
# Where they are missing, a test that needs these fixtures errors with "fixture not found".
try:
    from support.azure_server import azure_container, azure_server  # noqa: F401  (one Azurite per session)
    from support.gcs_server import gcs_bucket, gcs_server  # noqa: F401  (one GCS emulator per session)
    from support.remotes import remote, remote_proxy  # noqa: F401  (the shared scenarios' stores)
except ImportError as missing:
    if missing.name is None or not missing.name.startswith(("google", "azure", "gcp_storage_emulator")):
        raise

@pytest.fixture(autouse=True, scope="session")
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Local-only datasets keep their parsed index in the user's cache: point it at a temporary folder
    (subprocesses inherit it), so tests never write to the real ~/.cache."""
    import os

    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-minutes",
        type=float,
        default=None,
        help="run the chaos soak (tests/soak) for this many minutes instead of its 3 CI epochs",
    )
