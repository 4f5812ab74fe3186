"""``python -m stream_plugin``: the same command as ``stream-plugin``."""

import sys

from stream_plugin.cli import main

sys.exit(main())
