"""TOML scalars and arrays for the files qmodel writes (catalog entries, saved scenarios).

The standard library reads TOML but does not write it; the files qmodel writes hold only
booleans, integers, finite floats, strings and arrays of them, which this covers.
"""

from __future__ import annotations

import json
import math
from typing import Any

from qmodel.errors import InputError

__all__ = ["toml_value"]


def toml_value(v: Any, where: str) -> str:
    """``v`` as a TOML value; ``where`` names the field in the one-line error for anything else."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InputError(where, v, "TOML files hold finite numbers only")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x, where) for x in v) + "]"
    raise InputError(where, v, "cannot be written as TOML")
