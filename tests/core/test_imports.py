import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "statement",
    [
        "import stream_plugin",
        "from stream_plugin import MDSWriter, Stream, merge_index",
        "import stream_plugin.cli",
        "from stream_plugin.cli import build_parser; build_parser()",  # every command's options
    ],
)
def test_writers_and_the_cli_import_without_torch_or_tqdm(statement: str) -> None:
    check = (
        f"import sys; {statement}; assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'tqdm' not in sys.modules, 'tqdm was imported'"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


@pytest.mark.parametrize(
    "statement",
    [
        "import stream_plugin",
        "from stream_plugin import MDSWriter, Stream, merge_index",
        "from stream_plugin.storage import open_store; open_store('/tmp')",
    ],
)
def test_no_cloud_sdk_is_imported_until_its_scheme_is_used(statement: str) -> None:
    sdks = ["boto3", "botocore", "google.cloud.storage", "azure.storage.blob", "fsspec"]
    check = f"import sys; {statement}; loaded = [m for m in {sdks!r} if m in sys.modules]; assert not loaded, loaded"
    subprocess.run([sys.executable, "-c", check], check=True)


def test_each_backend_is_imported_when_its_scheme_is_first_used() -> None:
    check = (
        "import sys; from stream_plugin.storage import open_store; "
        "open_store('s3://b/p'); assert 'boto3' in sys.modules and 'google.cloud.storage' not in sys.modules; "
        "open_store('gs://b/p', anonymous=True); assert 'google.cloud.storage' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_reading_classes_are_exported_on_first_use() -> None:
    import stream_plugin
    from stream_plugin.reading.dataset import StreamingDataset
    from stream_plugin.reading.loader import StreamingDataLoader

    assert stream_plugin.StreamingDataset is StreamingDataset
    assert stream_plugin.StreamingDataLoader is StreamingDataLoader
    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        stream_plugin.NotAThing  # noqa: B018
