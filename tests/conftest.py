"""Shared fixtures: the public data folder (skip with a reason when absent) and the repo root;
hypothesis' profiles.

Property tests draw the same examples on every run by default (profile ``default``: derandomized),
so the suite, and CI with it, pass or fail on the code alone; a random draw that fails once and not
again (a float at a half-way label in tests/test_tui_plots.py did) blocks a landing without pointing
at a change. ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples instead, to look for new
failures; pin what it finds as an ``@example``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from data_needs import missing_data
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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
    """Never read or write the developer's real ~/.config/qmodel/catalog, nor fill the real cache
    folder (parsed traces of every test's files), during tests: one cache folder per session."""
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path_factory.getbasetemp() / "user-catalog"))
    monkeypatch.delenv("QMODEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    from qmodel import registry

    registry.clear_cache()
    yield
    registry.clear_cache()
