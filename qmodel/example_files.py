"""The example scenarios shipped in the package (``qmodel.examples``), so a ``pip install qmodel``
user has the files the README's commands name: list them, read one, copy it to edit."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from qmodel.errors import InputError

__all__ = ["Example", "list_examples", "example_path", "copy_example", "bundled_fallback"]

_SUFFIXES = (".yaml", ".yml", ".toml", ".json")
_DATA_REF = re.compile(r"data:[\w./-]+")


class Example(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)  # schema built on first use
    name: str
    file: str
    summary: str
    needs_data: list[str]


def _root() -> resources.abc.Traversable:
    """Where the examples are: ``qmodel/examples/`` in an installed wheel (package data, also inside
    a zip), else the checkout's ``examples/`` beside the package (a source or editable install)."""
    installed = resources.files("qmodel") / "examples"
    if installed.is_dir():
        return installed
    return resources.files("qmodel").joinpath("..", "examples")


def _files() -> dict[str, resources.abc.Traversable]:
    root = _root()
    return {f.name.rsplit(".", 1)[0]: f for f in root.iterdir() if f.name.endswith(_SUFFIXES)}


def _summary(name: str, text: str) -> str:
    """The file's leading comment block, else its model and topology."""
    lines = []
    for line in text.splitlines():
        st = line.strip()
        if not st.startswith("#"):
            break
        lines.append(st.lstrip("#").strip())
    para = " ".join(lines)
    if para:
        return para
    data = _parse(name, text)
    dep = data.get("deployment", {}) if isinstance(data, dict) else {}
    return f"{data.get('model', '?')}, {dep.get('topology', '?')}."


def _parse(name: str, text: str) -> dict:
    import json
    import tomllib

    import yaml

    if name.endswith(".json"):
        return json.loads(text)
    if name.endswith(".toml"):
        return tomllib.loads(text)
    return yaml.safe_load(text)


def list_examples() -> list[Example]:
    """Every bundled example, with the data files (``data:...``, from ``QMODEL_DATA_DIR``) it reads."""
    out = []
    for name, f in sorted(_files().items()):
        text = f.read_text(encoding="utf-8")
        out.append(Example(name=name, file=f.name, summary=_summary(f.name, text), needs_data=sorted(set(_DATA_REF.findall(text)))))
    return out


def example_path(name: str) -> resources.abc.Traversable:
    """The bundled example called ``name`` (with or without its suffix or an ``examples/`` prefix)."""
    key = Path(name).name
    for suf in _SUFFIXES:
        key = key.removesuffix(suf)
    files = _files()
    if key not in files:
        import difflib  # the error path only: ~4 ms of every fresh qmodel process otherwise

        close = difflib.get_close_matches(key, list(files), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise InputError("example", name, f"one of {', '.join(sorted(files))}{hint}")
    return files[key]


def copy_example(name: str, dest: str | Path = ".", *, force: bool = False) -> Path:
    """Copy the example into folder ``dest`` (created); refuses to overwrite unless ``force``."""
    src = example_path(name)
    folder = Path(dest)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError("--dest", str(dest), f"a folder qmodel can create ({err.strerror})") from None
    target = folder / src.name
    if target.exists() and not force:
        raise InputError("--dest", str(target), "a path that does not exist yet (or pass --force)")
    target.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def bundled_fallback(path: str) -> resources.abc.Traversable | None:
    """The bundled example a missing scenario path names (``examples/NAME.yaml`` as the README
    writes it, run from a folder without the repository's examples), else None."""
    p = Path(path)
    try:
        if p.exists() or p.suffix not in _SUFFIXES:
            return None
    except OSError:  # a name the file system cannot hold (too long): not a bundled example either
        return None
    f = _files().get(p.stem)
    return f if f is not None and f.name == p.name else None
