"""Helpers shared by the trace-loader tests: a fresh loader cache per test, and trace files written
as UTF-8 text."""

from __future__ import annotations

from pathlib import Path

import pytest

from qmodel.validation.traces import clear_cache

__all__ = ["fresh_trace_cache", "write_trace"]


@pytest.fixture(autouse=True)
def fresh_trace_cache():
    """The loaders cache parsed files by path and mtime; each test starts and ends with none."""
    clear_cache()
    yield
    clear_cache()


def write_trace(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return p
