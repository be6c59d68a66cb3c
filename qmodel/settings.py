"""Where qmodel finds things outside the package: the public data folder and the user catalog.

* ``QMODEL_DATA_DIR``: the folder holding public traces and measured tables (the layout of the
  project's ``shared/data``). If unset, qmodel looks for ``shared/data`` beside the source checkout,
  ``../shared/data`` from the working directory, then the download cache (``qmodel trace fetch``
  writes there). When it is set, it is the only place looked at: a missing or empty folder means
  "no data" (so a run with ``QMODEL_DATA_DIR`` pointing to an empty folder really has none).
* ``QMODEL_CACHE_DIR``: qmodel's cache folder (default ``$XDG_CACHE_HOME/qmodel`` or
  ``~/.cache/qmodel``): downloads, the compiled catalog and parsed traces; deleting it is always safe.
* ``QMODEL_CATALOG_DIR``: extra catalog TOML files (``qmodel catalog import-hf`` writes there);
  default ``~/.config/qmodel/catalog``.

Scenario files refer to data files as ``data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv``; such
paths resolve under the data folder, so scenarios stay portable between machines. A ``data:`` path
must stay inside the data folder: no ``..`` part and not absolute (scenario files may come from
other people, e.g. through the TUI, and must not read arbitrary files by this name). A ``data:``
file that is not there keeps its logical name, and :func:`missing_file_problem` says how to get it
(``qmodel trace fetch NAME`` or ``QMODEL_DATA_DIR``).
"""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath

from qmodel.errors import DataError, InputError

__all__ = ["data_dir", "require_data_dir", "user_catalog_dir", "cache_dir", "resolve_data_path", "data_rel_path",
           "missing_file_problem", "path_exists"]

DATA_PREFIX = "data:"


def cache_dir() -> Path:
    """qmodel's cache folder: downloaded public traces, the compiled catalog, parsed traces.

    ``QMODEL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/qmodel`` or ``~/.cache/qmodel``."""
    env = os.environ.get("QMODEL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qmodel"


def data_dir() -> Path | None:
    """The public data folder, or None when none is available."""
    env = os.environ.get("QMODEL_DATA_DIR")
    if env:
        p = Path(env).expanduser()
        return p if _holds_data(p) else None
    here = Path(__file__).resolve().parent.parent  # the source checkout (editable installs)
    for cand in (here.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", cache_dir() / "data"):
        if _holds_data(cand):
            return cand
    return None


def _holds_data(p: Path) -> bool:
    """A data folder is a folder with something in it: an empty one (a CI run hiding the data) is none."""
    try:
        return p.is_dir() and any(p.iterdir())
    except (OSError, ValueError):  # unreadable, or a name the OS cannot look up: no data there
        return False


def require_data_dir() -> Path:
    d = data_dir()
    if d is None:
        raise DataError("QMODEL_DATA_DIR", "no data folder found; set QMODEL_DATA_DIR or run 'qmodel trace fetch NAME'")
    return d


def user_catalog_dir() -> Path:
    env = os.environ.get("QMODEL_CATALOG_DIR")
    return Path(env).expanduser() if env else Path.home() / ".config" / "qmodel" / "catalog"


def path_exists(p: Path) -> bool:
    """``p.exists()`` that answers False instead of raising for names the OS cannot look up.

    ``Path.exists`` raises ``OSError`` for a name longer than the file system allows (ENAMETOOLONG)
    and ``ValueError`` for an embedded NUL; to a caller choosing between candidate paths both mean
    "not there", and the reader's open reports the problem as a one-line error.
    """
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def data_rel_path(path: str, field: str = "path") -> str:
    """The part after ``data:``, checked to stay inside the data folder (see the module docstring).

    Raises :class:`~qmodel.errors.InputError` naming ``field`` for an empty, absolute or ``..``
    reference; the check is on the text (both ``/`` and ``\\`` count as separators), so it holds
    whatever the folder's contents.
    """
    rel = path[len(DATA_PREFIX):]
    parts = rel.replace("\\", "/").split("/")
    if PureWindowsPath(rel).anchor or ".." in parts or all(q in ("", ".") for q in parts):
        raise InputError(field, path if len(path) <= 80 else path[:77] + "...",
                         "a data: path names a file inside the data folder, e.g. "
                         "'data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv' (no '..', not absolute)")
    return rel


def resolve_data_path(path: str, base: Path | None = None, field: str = "path") -> Path:
    """Resolve ``data:REL`` under the data folder; relative paths against ``base`` (the scenario's folder).

    A ``data:`` file that is not in the data folder (or with no data folder) stays ``Path("data:REL")``
    so the error raised when it is opened names the portable name and, through
    :func:`missing_file_problem`, how to get it.
    """
    if path.startswith(DATA_PREFIX):
        rel = data_rel_path(path, field)
        d = data_dir()
        if d is None or not path_exists(d / rel):
            return Path(path)
        return d / rel
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        cand = base / p
        if path_exists(cand) or not path_exists(p):
            return cand
    return p


def missing_file_problem(path: str | Path, what: str = "file") -> str:
    """The error text for a file that is not there; for ``data:REL``, exactly how to get it.

    Names the ``qmodel trace fetch`` dataset that holds REL when the fetch registry has one
    (with ``--dest`` when ``QMODEL_DATA_DIR`` is set, since then the cache is not looked at),
    else asks for ``QMODEL_DATA_DIR``.
    """
    s = str(path)
    if not s.startswith(DATA_PREFIX):
        return f"no such {what}"
    rel = s[len(DATA_PREFIX):]
    from qmodel.validation.fetch import dataset_for

    ds = dataset_for(rel)
    d = data_dir()
    where = f"not in the data folder {d}" if d is not None else "no data folder found"
    env = os.environ.get("QMODEL_DATA_DIR")
    if ds is None:
        return f"{where}; set QMODEL_DATA_DIR to a folder holding {rel}"
    dest = f" --dest {env}" if env else ""
    return (f"{where}; get it with 'qmodel trace fetch {ds.name}{dest}' "
            f"(or set QMODEL_DATA_DIR to a folder holding {rel})")
