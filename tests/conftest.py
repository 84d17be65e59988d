"""Shared fixtures. Real data is found through a setting, never a fixed path:

* ``--data-dir DIR`` on the pytest command line, or
* the ``AUTOINT_DATA_DIR`` environment variable (``.ci/run`` sets it).

Tests that need it are skipped when neither is given, except under CI
(``CI=true``), where a missing data folder is an error rather than a silent skip.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--data-dir", default=None, help="folder holding the shared real CTR data")


@pytest.fixture(scope="session")
def data_dir(request: pytest.FixtureRequest) -> Path:
    value = request.config.getoption("--data-dir") or os.environ.get("AUTOINT_DATA_DIR")
    if not value:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no data folder: set AUTOINT_DATA_DIR or pass --data-dir")
        pytest.skip("real data not configured (set AUTOINT_DATA_DIR or pass --data-dir)")
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        pytest.fail(f"data folder {path} (from --data-dir / AUTOINT_DATA_DIR) does not exist")
    return path


@pytest.fixture(scope="session")
def criteo_head(data_dir: Path) -> Path:
    return data_dir / "criteo_kaggle_head10k" / "train.txt"


@pytest.fixture(scope="session")
def movielens_100k(data_dir: Path) -> Path:
    return data_dir / "movielens_100k"


@pytest.fixture(scope="session")
def frappe_dir(data_dir: Path) -> Path:
    return data_dir / "frappe_partial"


@pytest.fixture(scope="session")
def benchmark_script():
    """A loader of ``benchmarks/NAME.py`` as a module, so a test runs what the benchmark runs. Each call executes
    the script afresh, as ``NAME_bench`` in ``sys.modules`` (dataclasses look their module up there), with
    ``benchmarks/`` on ``sys.path`` for the scripts that import their neighbours."""
    folder = Path(__file__).resolve().parent.parent / "benchmarks"

    def load(name: str):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        spec = importlib.util.spec_from_file_location(f"{name}_bench", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    return load
