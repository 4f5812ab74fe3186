"""Every use of torch's private DataLoader internals, behind one door: ``make_iterator(loader)``.

``StreamingDataLoader`` asks ``make_iterator`` for each pass's iterator. Where the workers are forked it
hands their batches over faster than torch's own iterator, through torch's private internals (each
speed-up measured in ``benchmarks/RESULTS.md``):

- ``worker_pipes``: a pipe per worker each way instead of torch's two queues, around torch's own worker
  loop (``_BaseDataLoaderIter``, ``_worker_loop``, ``signal_handling``);
- ``iterators.widen_result_pipe``: torch's result queue's pipe (``_worker_result_queue._reader``) made to
  hold a whole batch, where torch's iterator is kept;
- a ``transport.SharedRegion`` per iterator for large batches, copied out by the iterator that owns it;
- persistent workers kept in torch's ``loader._iterator``, and shut down (``stop_workers``) when the
  loader restarts them.

The gate (``gate``) allows this only on a torch in ``CHECKED_TORCH_VERSIONS`` whose worker loop has
the expected shape; elsewhere, or where the user chose it (``StreamingDataLoader(...,
torch_iterator=True)`` or ``STREAM_PLUGIN_TORCH_ITERATOR=1``), the loader takes torch's own iterator
(``DataLoader.__iter__``). No module of the package outside this one names a torch private
(``tests/core/test_torch_internals_door.py``).
"""

from stream_plugin.reading.torch_internals.gate import (
    CHECKED_TORCH_VERSIONS,
    TORCH_ITERATOR_VARIABLE,
    torch_iterator_reason,
)
from stream_plugin.reading.torch_internals.iterators import make_iterator, stop_workers

__all__ = [
    "CHECKED_TORCH_VERSIONS",
    "TORCH_ITERATOR_VARIABLE",
    "make_iterator",
    "stop_workers",
    "torch_iterator_reason",
]
