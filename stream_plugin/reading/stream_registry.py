"""``streams_registry``: ``Stream`` classes by name, for the dataset's ``stream_name`` / ``stream_config``.

As in MosaicML Streaming 0.13, a dataset built from ``remote``/``local`` constructs its one stream with
the class registered under ``stream_name`` (default ``"stream"``, our ``Stream``), passing
``stream_config`` plus the dataset's ``remote``, ``local``, ``split`` and download settings. Register a
subclass in code (``streams_registry.register("mine", func=MyStream)``, also usable as a decorator) or
through the ``stream_plugin.streams`` entry-point group of an installed package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, overload

from stream_plugin.errors import ConfigError, ConfigTypeError
from stream_plugin.reading.stream import Stream

ENTRY_POINT_GROUP = "stream_plugin.streams"
DEFAULT_STREAM_NAME = "stream"  # the name our ``Stream`` is registered under: the default ``stream_name``

StreamClass = type[Stream]


class StreamRegistry:
    """Names to ``Stream`` subclasses; the choices offered in errors come from here."""

    def __init__(self) -> None:
        self._classes: dict[str, StreamClass] = {}

    @overload
    def register(self, name: str, *, func: StreamClass) -> StreamClass: ...

    @overload
    def register(self, name: str, *, func: None = None) -> Callable[[StreamClass], StreamClass]: ...

    def register(
        self, name: str, *, func: StreamClass | None = None
    ) -> StreamClass | Callable[[StreamClass], StreamClass]:
        """Register ``func`` (a ``Stream`` subclass) under ``name``; without ``func``, a decorator."""
        if func is None:
            return lambda cls: self.register(name, func=cls)
        if not isinstance(func, type) or not issubclass(func, Stream):
            raise ConfigTypeError(
                f"streams_registry.register({name!r}): expected a subclass of stream_plugin.Stream, found "
                f"{func!r}; derive your class from Stream"
            )
        self._classes[name] = func
        return func

    __call__ = register

    def get(self, name: str) -> StreamClass:
        """The class registered as ``name`` (in code, else through the entry-point group)."""
        found = self._classes.get(name)
        if found is None:
            for point in entry_points(group=ENTRY_POINT_GROUP, name=name):
                found = self.register(name, func=point.load())
        if found is None:
            raise ConfigError(
                f"stream_name: expected one of {sorted(self.get_all())}, found {name!r}; register your Stream "
                f"subclass first with streams_registry.register({name!r}, func=YourStream)"
            )
        return found

    def get_all(self) -> dict[str, StreamClass]:
        """Every registered name (entry points included) and its class."""
        names = {point.name for point in entry_points(group=ENTRY_POINT_GROUP)} - set(self._classes)
        for name in names:
            self.get(name)
        return dict(self._classes)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.get_all()


streams_registry = StreamRegistry()
streams_registry.register(DEFAULT_STREAM_NAME, func=Stream)


def build_streams(
    streams: Sequence[Stream] | None,
    *,
    defaults: dict[str, Any],
    stream_name: str = DEFAULT_STREAM_NAME,
    stream_config: dict[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Stream]:
    """The dataset's streams: the given ones with ``defaults`` applied, else one built by name.

    ``defaults`` holds the dataset's ``remote``, ``local``, ``split``, ``download_retry``,
    ``download_timeout``, ``validate_hash`` and ``keep_zip``; ``storage_options`` are the one built
    stream's (given streams carry their own).
    """
    if storage_options is not None:
        if streams is not None:
            raise ConfigError(
                "storage_options: expected it with remote/local (one stream), found it with streams; "
                "pass Stream(..., storage_options={...}) for each stream instead"
            )
        stream_config = {**(stream_config or {}), "storage_options": storage_options}
    has_location = defaults.get("remote") is not None or defaults.get("local") is not None
    if streams is not None:
        if has_location:
            raise ConfigError(
                "StreamingDataset: expected either streams or remote/local, found both; put remote/local "
                "into a Stream in the streams list"
            )
        if not streams:
            raise ConfigError("streams: expected at least one Stream, found an empty list")
        for stream in streams:
            stream.apply_default(defaults)
        return list(streams)
    if stream_config is not None and not isinstance(stream_config, dict):
        raise ConfigTypeError(
            f"stream_config: expected a dict of extra Stream arguments or None, found "
            f"{type(stream_config).__name__}; pass e.g. stream_config={{'proportion': 0.5}}"
        )
    # The dataset's arguments win over stream_config, as in MosaicML.
    arguments = {**(stream_config or {}), **defaults}
    return [streams_registry.get(stream_name)(**arguments)]


__all__ = ["DEFAULT_STREAM_NAME", "ENTRY_POINT_GROUP", "StreamRegistry", "build_streams", "streams_registry"]
