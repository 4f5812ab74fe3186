import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "statement",
    [
        "import stream_plugin",
        "from stream_plugin import MDSWriter, Stream, merge_index",
        "import stream_plugin.cli",
    ],
)
def test_writers_and_the_cli_import_without_torch_or_tqdm(statement: str) -> None:
    check = (
        f"import sys; {statement}; assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'tqdm' not in sys.modules, 'tqdm was imported'"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_reading_classes_are_exported_on_first_use() -> None:
    import stream_plugin
    from stream_plugin.dataset import StreamingDataset
    from stream_plugin.loader import StreamingDataLoader

    assert stream_plugin.StreamingDataset is StreamingDataset
    assert stream_plugin.StreamingDataLoader is StreamingDataLoader
    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        stream_plugin.NotAThing  # noqa: B018
