"""Root test configuration: makes the shared rigs in tests/support importable."""

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from support.azure_server import azure_container, azure_server  # noqa: E402, F401  (one Azurite per session)
from support.gcs_server import gcs_bucket, gcs_server  # noqa: E402, F401  (one GCS emulator per session)
from support.remotes import remote, remote_proxy  # noqa: E402, F401  (the shared scenarios' stores)
from support.s3_server import s3_bucket, s3_server  # noqa: E402, F401  (one moto server per session)
