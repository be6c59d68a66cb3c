"""Reading input files safely: UTF-8 text with byte offsets in errors, YAML without duplicate keys, bounded trees.

Every failure is a one-line :class:`~qmodel.errors.DataError` naming the file (exit 2), never a
traceback: undecodable bytes, OS errors (a missing file, a name too long), duplicate YAML keys and
trees that expand past :data:`MAX_SCENARIO_VALUES` (a YAML alias bomb) or nest past
:data:`MAX_SCENARIO_DEPTH`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from qmodel.errors import DataError, shorten

__all__ = ["MAX_SCENARIO_VALUES", "MAX_SCENARIO_DEPTH", "read_text", "yaml_loader", "load_yaml_cached", "check_size"]

#: The most values (mappings, lists and scalars, counted with aliases expanded) and the deepest
#: nesting a scenario may have. A real scenario has ~100 values; a YAML alias bomb expands a
#: 1.6 kB file to 10^8 and would run for minutes in every later walk of the tree.
MAX_SCENARIO_VALUES = 100_000
MAX_SCENARIO_DEPTH = 32


def read_text(path: Path) -> str:
    """A scenario (or other input) file's UTF-8 text; every read failure is a one-line DataError.

    Undecodable bytes name their byte offset; OS errors (missing file, a name too long, a folder)
    their reason.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(str(path), "no such file") from None
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror or type(err).__name__})") from None
    except ValueError as err:  # e.g. an embedded NUL in the name
        raise DataError(repr(str(path))[1:-1], f"cannot read ({err})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(str(path), f"not UTF-8 text: byte {err.start} is {raw[err.start:err.start + 1]!r} "
                                   f"({err.reason}); save the file as UTF-8") from None


def yaml_loader():
    """PyYAML's safe loader, refusing duplicate keys (the later one would silently win)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                except TypeError:  # an unhashable key: the base constructor reports it
                    break
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {shorten(key)} (line {key_node.start_mark.line + 1})",
                        key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return Loader


def load_yaml_cached(text: str) -> Any:
    """``yaml.load(text, Loader=yaml_loader())``, parsed once per text: the tree is kept as JSON in
    ``<cache_dir>/parsed/yaml-1/<key>.json`` (docs: README "Caches"), so a repeated ``qmodel`` run on
    the same file neither imports PyYAML (~10 ms of a cold CLI start) nor parses.

    The key is the SHA-256 of the text, the installed PyYAML's ``__init__.py`` and this module
    (path, size, mtime), so a changed file, PyYAML or loader gets a new entry. Only a tree JSON
    reproduces exactly is stored: str-keyed mappings, lists, str/int/float/bool/None scalars and no
    subtree used twice (a YAML alias shares one object, which ``--set`` would edit in both places).
    Parse errors are raised as ``yaml.load`` raises them (nothing is stored); a cache that cannot be
    read or written is skipped, never an error."""
    import hashlib
    import importlib.util
    import json

    from qmodel.settings import cache_dir

    path = None
    try:
        spec = importlib.util.find_spec("yaml")
        stamp = "".join(f"{f}:{os.stat(f).st_size}:{os.stat(f).st_mtime_ns}\0"
                        for f in (spec.origin if spec else "", __file__))
        key = hashlib.sha256(f"{stamp}{text}".encode()).hexdigest()
        path = cache_dir() / "parsed" / "yaml-1" / f"{key}.json"
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, ImportError):
        pass
    import yaml

    data = yaml.load(text, Loader=yaml_loader())
    if path is not None and _json_exact(data):
        try:
            blob = json.dumps(data)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(blob, encoding="utf-8")
            os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
        except (OSError, ValueError, RecursionError):  # read-only cache folder, or too deep to write
            pass
    return data


def _json_exact(data: Any) -> bool:
    """Whether ``json.loads(json.dumps(data))`` rebuilds ``data`` with the same types and no shared
    subtrees (see :func:`load_yaml_cached`)."""
    seen: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict or kind is list:
            if id(node) in seen:
                return False
            seen.add(id(node))
            if kind is dict:
                if any(type(k) is not str for k in node):
                    return False
                stack.extend(node.values())
            else:
                stack.extend(node)
        elif kind not in (str, int, float, bool, type(None)):
            return False
    return True


def check_size(data: Any, source: str) -> None:
    """Refuse a tree of more than MAX_SCENARIO_VALUES values (aliases expanded) or deeper than MAX_SCENARIO_DEPTH.

    Shared subtrees (YAML aliases) are counted once per use, in time linear in the distinct nodes.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, int, bool]] = [(data, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_SCENARIO_DEPTH:
            raise DataError(source, f"nested deeper than {MAX_SCENARIO_DEPTH} levels; a scenario is a few levels deep")
        kids = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else None
        if kids is None or id(node) in sizes:
            continue
        if not done:
            stack.append((node, depth, True))
            stack.extend((k, depth + 1, False) for k in kids if isinstance(k, (dict, list)) and id(k) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
        if sizes[id(node)] > MAX_SCENARIO_VALUES:
            raise DataError(source, f"expands to more than {MAX_SCENARIO_VALUES} values (YAML aliases?); "
                                    "a scenario has at most a few hundred")
