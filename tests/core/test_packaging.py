"""What a user installs: one version everywhere, the wheel's LICENSE and py.typed, extras' install hints."""

from __future__ import annotations

import email
import importlib
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from support.paths import REPO_DIR

from stream_plugin._version import __version__
from stream_plugin.errors import MissingDependencyError


@pytest.mark.parametrize("package", ["stream_plugin", "stream_plugin_lightning", "stream_plugin_composer"])
def test_every_package_reports_the_one_version(package: str) -> None:
    try:
        module = importlib.import_module(package)
    except MissingDependencyError as missing:  # its extra is not installed in this environment
        pytest.skip(str(missing))
    assert module.__version__ == __version__
    assert version("stream-plugin") == __version__


# Makes `import NAME` fail as it does where the extra is not installed.
_HIDE = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r} or name.startswith({name!r} + "."):
            raise ImportError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Hide())
try:
    import {package}
except ImportError as error:
    print(f"{{type(error).__name__}}: {{error}}")
"""


@pytest.mark.parametrize(
    ("package", "name", "extra"),
    [
        ("stream_plugin_lightning", "lightning", "lightning"),
        ("stream_plugin_composer", "composer", "composer"),
    ],
)
def test_importing_an_integration_without_its_extra_names_the_extra(
    package: str, name: str, extra: str
) -> None:
    script = _HIDE.format(name=name, package=package)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.startswith(f"MissingDependencyError: {package} needs the {name!r} package")
    assert f"pip install 'stream-plugin[{extra}]'" in result.stdout


def test_a_folder_named_like_the_extra_is_not_taken_for_it(tmp_path: Path) -> None:
    (tmp_path / "composer").mkdir()  # as tests/composer is, when its parent is on sys.path
    script = "import stream_plugin_composer"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    if result.returncode == 0:
        pytest.skip("Composer is installed here")
    assert "found only a folder of that name" in result.stderr
    assert "pip install 'stream-plugin[composer]'" in result.stderr


@pytest.mark.slow
def test_the_wheel_ships_license_py_typed_and_metadata(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_DIR / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO_DIR / "stream_plugin", source / "stream_plugin", ignore=ignore)
    shutil.copytree(REPO_DIR / "integrations", source / "integrations", ignore=ignore)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
        check=True,
        capture_output=True,
    )
    [wheel] = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"stream_plugin-{__version__}.dist-info"
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    assert {
        f"{package}/py.typed"
        for package in ("stream_plugin", "stream_plugin_lightning", "stream_plugin_composer")
    } <= names
    assert metadata["Version"] == __version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Requires-Python"] == ">=3.11"  # the version CI tests on (scripts/test, Python 3.11)
    assert {"parquet", "all", "lightning", "composer"} <= set(metadata.get_all("Provides-Extra") or [])
