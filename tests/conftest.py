"""Shared fixtures: the public data folder (skip with a reason when absent) and the repo root."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_needs import missing_data

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a ``needs_data`` test, saying what is missing, when its data is absent (tests/data_needs.py)."""
    for mark in item.iter_markers("needs_data"):
        why = missing_data(*mark.args)
        if why is not None:
            pytest.skip(why)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    from qmodel.settings import data_dir as find

    why = missing_data()
    if why is not None:
        pytest.skip(why)
    return find()


@pytest.fixture(autouse=True)
def _isolated_user_catalog(tmp_path_factory, monkeypatch):
    """Never read or write the developer's real ~/.config/qmodel/catalog during tests."""
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path_factory.getbasetemp() / "user-catalog"))
    from qmodel import registry

    registry.clear_cache()
    yield
    registry.clear_cache()
