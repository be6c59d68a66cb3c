"""Which tests need the public data folder, and why they skip without it (one implementation).

``@pytest.mark.needs_data("distserve/max_num_tokens.csv", ...)`` marks a test that reads those files
under the data folder (:func:`qmodel.settings.data_dir`); with no arguments it needs the folder
only. ``conftest.py`` skips a marked test, with :func:`missing_data`'s reason, when the folder or a
listed file is absent, and the ``data_dir`` fixture skips the same way. :func:`example_needs` marks
a test that solves a bundled example with the ``data:`` files that example reads, so an example
that runs on a fresh clone is tested there and one that needs a trace skips saying which.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

_DATA_REF = re.compile(r"data:([\w./-]+)")


def missing_data(*rel_paths: str) -> str | None:
    """Why a test needing the data folder (and ``rel_paths`` in it) cannot run; None when it can."""
    from qmodel.settings import data_dir

    d = data_dir()
    if d is None:
        return ("public data folder not found: set QMODEL_DATA_DIR (or place shared/data beside the "
                "checkout, or run 'qmodel trace fetch NAME')")
    missing = [r for r in rel_paths if not (d / r).is_file()]
    if missing:
        return f"needs {', '.join(missing)} in the data folder {d} ('qmodel trace fetch --list' names them)"
    return None


def example_needs(name: str) -> list[pytest.MarkDecorator]:
    """The marks for a test of the example ``examples/NAME.*``: ``needs_data`` with the ``data:``
    files it reads, or none when it reads none (it must then run without the data folder)."""
    (path,) = EXAMPLES.glob(f"{name}.*")
    refs = sorted(set(_DATA_REF.findall(path.read_text(encoding="utf-8"))))
    return [pytest.mark.needs_data(*refs)] if refs else []


def example_param(name: str, *values: object) -> object:
    """``pytest.param(name, *values)`` carrying :func:`example_needs`'s marks."""
    return pytest.param(name, *values, marks=example_needs(name))
