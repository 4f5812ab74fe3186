"""Makes the shared helpers of tests/order (``whole_job``) importable from any test module."""

import sys
from pathlib import Path

ORDER_TESTS_DIR = str(Path(__file__).resolve().parent)
if ORDER_TESTS_DIR not in sys.path:
    sys.path.insert(0, ORDER_TESTS_DIR)
