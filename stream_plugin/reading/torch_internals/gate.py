"""Whether this process may use torch's private DataLoader internals, or must keep torch's own iterator.

The faster hand-off (``worker_pipes``, the result pipe widened, a ``SharedRegion`` per iterator) calls
into torch's private internals, which any torch release may change. It is used only on a torch this
project was tested with (``CHECKED_TORCH_VERSIONS``, each by a test run in its own environment) whose
worker loop has the shape ``worker_pipes`` calls; elsewhere the loader keeps torch's own iterator and
says so once. A user can choose torch's own iterator anyway, with ``StreamingDataLoader(...,
torch_iterator=True)`` or ``STREAM_PLUGIN_TORCH_ITERATOR=1``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import torch

from stream_plugin.reading.torch_internals.worker_pipes import worker_loop_dataset_parameter
from stream_plugin.redaction import get_logger

# torch releases whose internals the fast path was tested against: Composer's environment (.venv-composer),
# the main one (.venv) and the peers' (.venv-peers). A local build tag ("+cpu", "+cu130") is ignored.
CHECKED_TORCH_VERSIONS = ("2.7.0", "2.13.0", "2.14.1")
TORCH_ITERATOR_VARIABLE = "STREAM_PLUGIN_TORCH_ITERATOR"  # "1": always torch's own DataLoader iterator
_OPT_OUT = f"StreamingDataLoader(..., torch_iterator=True) or {TORCH_ITERATOR_VARIABLE}=1"

_log = get_logger(__name__)


def torch_release(version: str | None = None) -> str:
    """``version`` (torch's own by default) without its local build tag: ``2.13.0+cpu`` is ``2.13.0``."""
    return str(torch.__version__ if version is None else version).split("+", 1)[0]


def torch_iterator_reason(loader: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``loader`` must take torch's own iterator (the user's choice, an unchecked torch, or a worker
    loop of unknown shape), or None where it may use the faster hand-off. An unchecked torch or worker
    loop is logged once per process, with the way to choose torch's iterator (which silences it)."""
    env = os.environ if environ is None else environ
    if getattr(loader, "torch_iterator", False):
        return "torch_iterator=True"
    if env.get(TORCH_ITERATOR_VARIABLE, "") not in ("", "0"):
        return f"{TORCH_ITERATOR_VARIABLE}={env[TORCH_ITERATOR_VARIABLE]}"
    release = torch_release()
    if release not in CHECKED_TORCH_VERSIONS:
        return _warn_once(
            f"stream_plugin: expected torch {' / '.join(CHECKED_TORCH_VERSIONS)} for the faster DataLoader "
            f"hand-off (it calls torch's private internals), found torch {release}; using torch's own iterator "
            f"(slower batches from workers). To choose it and silence this: {_OPT_OUT}"
        )
    if worker_loop_dataset_parameter() is None:
        return _warn_once(
            f"stream_plugin: expected torch {release}'s DataLoader worker loop to take the parameters the "
            f"faster hand-off passes, found another shape; using torch's own iterator (slower batches from "
            f"workers). To choose it and silence this: {_OPT_OUT}"
        )
    return None


@functools.cache
def _warn_once(message: str) -> str:
    _log.warning(message)
    return message


__all__ = ["CHECKED_TORCH_VERSIONS", "TORCH_ITERATOR_VARIABLE", "torch_iterator_reason", "torch_release"]
