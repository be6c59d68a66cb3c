"""Shared output helpers for CLI verbs: JSON (stable, plain floats) and aligned text tables."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Sequence

from pydantic import BaseModel

__all__ = ["to_plain", "print_json", "print_table", "add_set_option"]


def to_plain(obj: Any) -> Any:
    """Pydantic models, numpy scalars/arrays and tuples -> JSON-ready Python values (no NaN/inf)."""
    if isinstance(obj, BaseModel):
        return to_plain(obj.model_dump(mode="python"))
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return to_plain(obj.tolist())
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError("refusing to print a non-finite number as JSON")
        return obj
    return obj


def print_json(obj: Any, stream=None) -> None:
    stream = stream or sys.stdout
    json.dump(to_plain(obj), stream, indent=2, sort_keys=False)
    stream.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], stream=None) -> None:
    stream = stream or sys.stdout
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        stream.write("  ".join(c.rjust(w) if j and _numeric(c) else c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
        if j == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _numeric(s: str) -> bool:
    try:
        float(s.rstrip("%"))
        return True
    except ValueError:
        return False


def add_set_option(p) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a scenario field, e.g. --set deployment.prefill.instances=4 (repeatable)")
