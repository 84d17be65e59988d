"""Shared fixtures. Real data is found through a setting, never a fixed path:

* ``--data-dir DIR`` on the pytest command line, or
* the ``AUTOINT_DATA_DIR`` environment variable (``.ci/run`` sets it).

Tests that need it are skipped when neither is given, except under CI
(``CI=true``), where a missing data folder is an error rather than a silent skip.
"""

from __future__ import annotations

import os
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
