"""Reading input files safely: UTF-8 text with byte offsets in errors, YAML without duplicate keys, bounded trees.

Every failure is a one-line :class:`~qmodel.errors.DataError` naming the file (exit 2), never a
traceback: undecodable bytes, OS errors (a missing file, a name too long), duplicate YAML keys and
trees that expand past :data:`MAX_SCENARIO_VALUES` (a YAML alias bomb) or nest past
:data:`MAX_SCENARIO_DEPTH`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qmodel.errors import DataError, shorten

__all__ = ["MAX_SCENARIO_VALUES", "MAX_SCENARIO_DEPTH", "read_text", "yaml_loader", "check_size"]

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
