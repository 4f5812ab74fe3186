"""Choosing an ``ObjectStore`` from a URL, and the ``out`` / remote-URL conventions of MosaicML.

Built in, each imported only when its scheme is first used (so ``import stream_plugin`` loads no
cloud SDK): local paths and ``file://`` → ``LocalStore``; ``s3://`` → ``S3Store``; ``http(s)://`` →
``HttpStore`` (read-only); ``gs://`` → ``GcsStore`` (extra ``[gcs]``); ``azure://`` and ``az://`` →
``AzureStore`` (extra ``[azure]``); ``hf://datasets/...`` → ``HubStore`` (read-only, extra ``[hf]``).

Any other scheme is looked up in the entry-point group ``stream_plugin.storage``: the entry-point name
is the scheme and the object is a factory ``factory(url, **options) -> ObjectStore``. A package adds
``myscheme://`` support like this::

    # pyproject.toml of the plugin package
    [project.entry-points."stream_plugin.storage"]
    myscheme = "my_package.store:open_my_store"

    # my_package/store.py
    def open_my_store(url: str, **options) -> MyStore: ...

After ``pip install my-package``, ``open_store("myscheme://bucket/data")`` returns a ``MyStore``. The
store must raise ``RemoteNotFoundError`` / ``RemoteAccessDeniedError`` / ``TransientStorageError``
(from ``stream_plugin.storage``) so retries and fail-fast work. Built-in schemes cannot be overridden.

A scheme that is neither built in nor a plugin falls back to ``fsspec`` (extra ``[fsspec]``) when
fsspec knows the protocol (``sftp://``, ``abfs://``, ``memory://``, ...): ``FsspecStore``.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from stream_plugin.errors import ConfigError, MissingDependencyError
from stream_plugin.redaction import REDACTED_LIBRARY_LOGGERS, redact_loggers, redact_url
from stream_plugin.storage.base import ObjectStore

ENTRY_POINT_GROUP = "stream_plugin.storage"
StoreFactory = Callable[..., ObjectStore]


@dataclass(frozen=True)
class Backend:
    """A built-in store: where its class lives (``module:attribute``) and the pip extra it needs."""

    target: str
    extra: str | None = None  # None: its dependencies are core dependencies

    def load(self, scheme: str) -> StoreFactory:
        """Import the store class; a missing SDK is a ``MissingDependencyError`` naming the extra."""
        module_name, _, attribute = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            install = f"pip install 'stream-plugin[{self.extra}]'" if self.extra else "reinstall stream-plugin"
            raise MissingDependencyError(
                f"Expected the {scheme}:// backend ({self.target}) to import, found {error}; {install}."
            ) from error
        factory: StoreFactory = getattr(module, attribute)
        return factory


BUILTIN_BACKENDS: Mapping[str, Backend] = MappingProxyType(
    {
        "file": Backend("stream_plugin.storage.local:LocalStore"),
        "s3": Backend("stream_plugin.storage.s3:S3Store"),
        "http": Backend("stream_plugin.storage.http:HttpStore"),
        "https": Backend("stream_plugin.storage.http:HttpStore"),
        "gs": Backend("stream_plugin.storage.gcs:open_gcs_store", extra="gcs"),
        "azure": Backend("stream_plugin.storage.azure:AzureStore", extra="azure"),
        "az": Backend("stream_plugin.storage.azure:AzureStore", extra="azure"),
        "hf": Backend("stream_plugin.storage.hub:HubStore", extra="hf"),
    }
)
FSSPEC_BACKEND = Backend("stream_plugin.storage.fsspec_store:FsspecStore", extra="fsspec")
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
    """Every scheme ``open_store`` serves without fsspec: built-in and installed plugins."""
    return sorted(set(BUILTIN_BACKENDS) | set(plugin_entry_points()))


def fsspec_protocols() -> frozenset[str]:
    """The protocols fsspec knows (installed or not); empty when fsspec itself is not installed."""
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return frozenset()
    return frozenset(known_implementations) | frozenset(registry)


def factory_for(scheme: str) -> StoreFactory:
    """The factory serving ``scheme``: built in, else an installed entry point, else fsspec."""
    if scheme in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[scheme].load(scheme)
    plugins = plugin_entry_points()
    if scheme not in plugins:
        if scheme in fsspec_protocols():
            return FSSPEC_BACKEND.load(scheme)
        raise ConfigError(
            f"Expected a URL scheme in {known_schemes()} or one fsspec knows, found {scheme!r}; check the "
            f"URL, install 'stream-plugin[fsspec]' (and the fsspec implementation for {scheme!r}), or {HOW_TO_ADD}."
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


def check_storage_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` as a plain dict; anything but a mapping with string keys is refused."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise ConfigError(
            f"storage_options: expected a dict of option name to value (such as {{'endpoint_url': ...}}), found "
            f"{options!r:.80}; pass a dict with string keys"
        )
    return dict(options)


def open_store(url: str | os.PathLike[str], **options: Any) -> ObjectStore:
    """The ``ObjectStore`` for ``url``; ``options`` go to the backend (a stream's ``storage_options``:
    an endpoint, credentials, a requester-pays project; see each store's docstring)."""
    scheme = scheme_of(url)
    factory = factory_for(scheme)
    target = os.fspath(url)
    redact_loggers(REDACTED_LIBRARY_LOGGERS)  # the SDKs' request logs, before any request is sent
    try:
        signature = inspect.signature(factory)
    except ValueError:
        return factory(target, **options)  # Some callables (C builtins) have no signature: the call reports.
    try:
        signature.bind(target, **options)
    except TypeError as error:
        working = store_options(signature)
        unknown = sorted(set(options) - set(working)) if working is not None else []
        found = f"unknown option(s) {unknown}" if unknown else f"{sorted(options)} ({error})"
        raise ConfigError(
            f"storage_options for {redact_url(target)!r}: expected options of the {scheme}:// store "
            f"({', '.join(working) or 'it takes none' if working is not None else 'see its docstring'}), found {found}; "
            f"drop or rename them."
        ) from None
    return factory(target, **options)


def store_options(signature: inspect.Signature) -> list[str] | None:
    """The option names a store factory takes (its keyword parameters but ``environ``, a test hook);
    None when it takes any (``**options``)."""
    names = []
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if parameter.kind is not inspect.Parameter.VAR_POSITIONAL and parameter.name != "environ":
            names.append(parameter.name)
    return names
