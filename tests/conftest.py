"""Shared fixtures: the public data folder (skip with a reason when absent) and the repo root."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    from qmodel.settings import data_dir as find

    d = find()
    if d is None:
        pytest.skip("public data folder not found: set QMODEL_DATA_DIR (or place shared/data beside the checkout)")
    return d


@pytest.fixture(autouse=True)
def _isolated_user_catalog(tmp_path_factory, monkeypatch):
    """Never read or write the developer's real ~/.config/qmodel/catalog during tests."""
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path_factory.getbasetemp() / "user-catalog"))
    from qmodel import registry

    registry.clear_cache()
    yield
    registry.clear_cache()
