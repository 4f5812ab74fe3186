"""Choosing an ``ObjectStore`` from a URL, and the ``out`` / remote-URL conventions of MosaicML.

Built in: local paths and ``file://`` → ``LocalStore``; ``s3://`` → ``S3Store``; ``http(s)://`` →
``HttpStore`` (read-only). Any other scheme is looked up in the entry-point group
``stream_plugin.storage``: the entry-point name is the scheme and the object is a factory
``factory(url, **options) -> ObjectStore``. A package adds ``gs://`` support like this::

    # pyproject.toml of the plugin package
    [project.entry-points."stream_plugin.storage"]
    gs = "my_package.gcs:open_gcs_store"

    # my_package/gcs.py
    def open_gcs_store(url: str, **options) -> GcsStore: ...

After ``pip install my-package``, ``open_store("gs://bucket/data")`` returns a ``GcsStore``. The store
must raise ``RemoteNotFoundError`` / ``RemoteAccessDeniedError`` / ``TransientStorageError`` (from
``stream_plugin.storage``) so retries and fail-fast work. Built-in schemes cannot be overridden.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.storage.base import ObjectStore
from stream_plugin.storage.http import HttpStore
from stream_plugin.storage.local import LocalStore
from stream_plugin.storage.s3 import S3Store

ENTRY_POINT_GROUP = "stream_plugin.storage"
StoreFactory = Callable[..., ObjectStore]

BUILTIN_FACTORIES: Mapping[str, StoreFactory] = MappingProxyType(
    {"file": LocalStore, "s3": S3Store, "http": HttpStore, "https": HttpStore}
)
HOW_TO_ADD = (
    f'register a factory under the entry-point group "{ENTRY_POINT_GROUP}" in the plugin\'s pyproject.toml: '
    f'[project.entry-points."{ENTRY_POINT_GROUP}"] myscheme = "my_package.module:factory"'
)


def scheme_of(url: str | os.PathLike[str]) -> str:
    """The URL scheme in lower case; ``"file"`` for plain paths (including ``C:\\...`` on Windows)."""
    text = os.fspath(url)
    if text.startswith("file:"):
        return "file"
    if "://" not in text:
        return "file"
    return urlsplit(text).scheme.lower() or "file"


def is_remote(url: str | os.PathLike[str] | None) -> bool:
    """Whether ``url`` names something other than the local file system (``s3://``, ``https://``, ...)."""
    return url is not None and scheme_of(url) != "file"


def split_out(out: str | os.PathLike[str] | tuple[str, str]) -> tuple[str | None, str | None]:
    """A writer's ``out`` as MosaicML reads it: ``(local, remote)``.

    A local path gives ``(path, None)``; a remote URL gives ``(None, url)``; a ``(local, remote)``
    pair gives both.
    """
    if isinstance(out, (tuple, list)):
        if len(out) != 2 or not all(isinstance(part, (str, os.PathLike)) for part in out):
            raise ConfigError(
                f"Expected out=(local_dir, remote_url), found {out!r}; pass a 2-tuple of strings or a single path/URL."
            )
        local, remote = (os.fspath(part) for part in out)
        if is_remote(local):
            raise ConfigError(
                f"Expected the first element of out=(local, remote) to be a local folder, found {local!r}; swap them."
            )
        return local, remote
    if isinstance(out, (str, os.PathLike)):
        text = os.fspath(out)
        return (None, text) if is_remote(text) else (text, None)
    raise ConfigError(
        f"Expected out to be a path, a URL or a (local, remote) tuple, found {type(out).__name__}; pass a string."
    )


def plugin_entry_points() -> dict[str, EntryPoint]:
    """Installed third-party store factories by scheme (read fresh each call: installs can change)."""
    return {entry.name.lower(): entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def known_schemes() -> list[str]:
    """Every scheme ``open_store`` accepts right now."""
    return sorted(set(BUILTIN_FACTORIES) | set(plugin_entry_points()))


def factory_for(scheme: str) -> StoreFactory:
    """The factory serving ``scheme``: built in, else an installed entry point."""
    if scheme in BUILTIN_FACTORIES:
        return BUILTIN_FACTORIES[scheme]
    plugins = plugin_entry_points()
    if scheme not in plugins:
        raise ConfigError(
            f"Expected a URL scheme in {known_schemes()}, found {scheme!r}; check the URL, or {HOW_TO_ADD}."
        )
    entry = plugins[scheme]
    try:
        factory = entry.load()
    except ImportError as error:
        raise MissingDependencyError(
            f"Expected the storage plugin {entry.value!r} for scheme {scheme!r} to import, found {error}; "
            f"install the package that provides it."
        ) from error
    if not callable(factory):
        raise ConfigError(
            f"Expected entry point {scheme} = {entry.value!r} to name a callable factory(url, **options), "
            f"found {type(factory).__name__}; fix the plugin's pyproject.toml."
        )
    return factory


def open_store(url: str | os.PathLike[str], **options: Any) -> ObjectStore:
    """The ``ObjectStore`` for ``url``; ``options`` go to the backend (e.g. ``endpoint_url`` for S3)."""
    scheme = scheme_of(url)
    factory = factory_for(scheme)
    target = os.fspath(url)
    try:
        inspect.signature(factory).bind(target, **options)
    except TypeError as error:
        raise ConfigError(
            f"Expected options accepted by the {scheme!r} store, found {sorted(options)} ({error}); "
            f"drop the options that do not apply to {target!r}."
        ) from error
    except ValueError:
        pass  # Some callables (C builtins) have no signature; let the call itself report problems.
    return factory(target, **options)
