"""pyarrow for the Parquet modules, or an error that names the extra which installs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stream_plugin.extras import require_extra

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:
    _NEEDED_BY = "Parquet datasets (index_parquet, and reading a Parquet index)"
    pa = require_extra("pyarrow", extra="parquet", needed_by=_NEEDED_BY)
    pq = require_extra("pyarrow.parquet", extra="parquet", needed_by=_NEEDED_BY)

__all__ = ["pa", "pq"]
