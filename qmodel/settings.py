"""Where qmodel finds things outside the package: the public data folder and the user catalog.

* ``QMODEL_DATA_DIR``: the folder holding public traces and measured tables (the layout of the
  project's ``shared/data``). If unset, qmodel looks for ``shared/data`` beside the source checkout
  and then for the download cache (``qmodel trace fetch`` writes there).
* ``QMODEL_CATALOG_DIR``: extra catalog TOML files (``qmodel catalog import-hf`` writes there);
  default ``~/.config/qmodel/catalog``.

Scenario files refer to data files as ``data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv``; such
paths resolve under the data folder, so scenarios stay portable between machines.
"""

from __future__ import annotations

import os
from pathlib import Path

from qmodel.errors import DataError

__all__ = ["data_dir", "require_data_dir", "user_catalog_dir", "cache_dir", "resolve_data_path"]


def cache_dir() -> Path:
    """Download cache for public traces (``$XDG_CACHE_HOME/qmodel`` or ``~/.cache/qmodel``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qmodel"


def data_dir() -> Path | None:
    """The public data folder, or None when none is available."""
    env = os.environ.get("QMODEL_DATA_DIR")
    if env:
        p = Path(env).expanduser()
        return p if p.is_dir() else None
    here = Path(__file__).resolve().parent.parent  # the source checkout (editable installs)
    for cand in (here.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", cache_dir() / "data"):
        if cand.is_dir():
            return cand
    return None


def require_data_dir() -> Path:
    d = data_dir()
    if d is None:
        raise DataError("QMODEL_DATA_DIR", "no data folder found; set QMODEL_DATA_DIR or run 'qmodel trace fetch NAME'")
    return d


def user_catalog_dir() -> Path:
    env = os.environ.get("QMODEL_CATALOG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".config" / "qmodel" / "catalog"


def resolve_data_path(path: str, base: Path | None = None) -> Path:
    """Resolve ``data:REL`` under the data folder; relative paths against ``base`` (the scenario's folder)."""
    if path.startswith("data:"):
        d = data_dir()
        if d is None:
            # Keep the logical name so the error, when the file is opened, says what is missing.
            return Path(path)
        return d / path[len("data:"):]
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        cand = base / p
        if cand.exists() or not p.exists():
            return cand
    return p
