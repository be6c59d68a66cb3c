"""The provenance header of a qmodel CSV table (``# key: value`` lines before the column names).

``qmodel perf import`` writes, e.g.::

    # qmodel-table: 1
    # layout: grid
    # source: aic
    # source_file: h200_sxm/vllm/0.24.0 sha256=3f2a...
    # model: meta-llama/Meta-Llama-3.1-8B
    # hardware: h200_sxm
    # tp: 1
    # method: aiconfigurator_core cli_estimate static_ctx / static_gen, database_mode SILICON
    # note: ...
    phase,batch_size,prompt_tokens,context_tokens,time_s,tp

Every line is an ordinary CSV comment, so older readers ignore it. ``layout`` is ``sweep`` (the
default: one-factor sweeps, :class:`~qmodel.perf.tables.SweepTableModel`) or ``grid`` (every
batch x length combination, :class:`~qmodel.perf.grid.GridTableModel`). Keys may repeat
(``source_file``, ``note``); :func:`parse_header` returns repeated keys as lists.
"""

from __future__ import annotations

import re

__all__ = ["HEADER_VERSION", "LAYOUTS", "parse_header", "format_header"]

#: version written in the ``qmodel-table`` line
HEADER_VERSION = 1
#: allowed values of the ``layout`` key
LAYOUTS = ("sweep", "grid")
_LINE = re.compile(r"^#\s*([A-Za-z_][\w-]*)\s*:\s*(.*?)\s*$")
_REPEATABLE = ("source_file", "note")


def parse_header(text: str) -> dict[str, str | list[str]]:
    """``# key: value`` lines of the leading comment block (stops at the first non-comment line).

    Only a block that contains the ``qmodel-table`` line is a header: a hand-written table whose
    comments happen to look like ``# Note: ...`` gets ``{}`` and loads exactly as before.
    """
    out: dict[str, str | list[str]] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            break
        m = _LINE.match(s)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if key in _REPEATABLE:
            lst = out.setdefault(key, [])
            assert isinstance(lst, list)
            lst.append(value)
        else:
            out[key] = value
    return out if "qmodel-table" in out else {}


def format_header(fields: dict[str, str | list[str]]) -> str:
    """The header block for ``fields`` (``qmodel-table`` first; one line per value; no newlines inside)."""
    lines = [f"# qmodel-table: {HEADER_VERSION}"]
    for key, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            lines.append(f"# {key}: {' '.join(str(v).split())}")
    return "\n".join(lines) + "\n"
