"""The package version, defined here only: pyproject.toml, ``stream-plugin --version`` and the
``__version__`` of stream_plugin, stream_plugin_lightning and stream_plugin_composer all read it."""

__version__ = "0.1.0"
