"""Shared output helpers for CLI verbs: JSON (stable, plain floats), aligned text tables and prose.

Text output fits :data:`DEFAULT_WIDTH` columns unless the verb ran with ``--wide``: a table too wide
for it wraps its widest text column inside the cell (numbers are never cut); a prose line wraps at
word boundaries with its continuation indented two columns past the line's own indent; a shell
command wraps with `` \\`` continuations, so it still pastes as one command.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import textwrap
from typing import Any, Sequence

__all__ = ["DEFAULT_WIDTH", "set_width", "text_width", "say", "say_command", "to_plain", "print_json",
           "print_latencies",
           "print_table", "set_markdown", "add_progress_option", "progress_on", "add_width_option", "add_set_option"]

#: columns of text output by default (``--wide``: no limit)
DEFAULT_WIDTH = 100
_state: dict[str, int | None] = {"width": DEFAULT_WIDTH, "markdown": 0}


def set_width(width: int | None) -> None:
    """Columns text output may use from now on (None: unlimited, the ``--wide`` option)."""
    _state["width"] = width


def text_width() -> int | None:
    return _state["width"]


def set_markdown(on: bool) -> None:
    """Tables as GitHub-flavoured Markdown (``--markdown``): pipes, a header rule, nothing wrapped."""
    _state["markdown"] = int(on)


def _wrap_line(line: str, width: int | None) -> list[str]:
    if width is None or len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line.strip(), width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [line]


def say(text: str = "", stream=None) -> None:
    """Print prose (one or more lines), each line wrapped to the output width."""
    stream = stream or sys.stdout
    for line in text.split("\n"):
        for part in _wrap_line(line, text_width()):
            stream.write(part + "\n")


def say_command(command: str, indent: str = "  ", stream=None) -> None:
    """Print a shell command wrapped with `` \\`` continuations at argument boundaries (it still pastes)."""
    stream = stream or sys.stdout
    width = text_width()
    if width is None or len(indent) + len(command) <= width:
        stream.write(indent + command + "\n")
        return
    lines, cur = [], indent
    lexer = shlex.shlex(command, posix=False)
    lexer.whitespace_split = True
    for tok in lexer:
        starts_option = tok.startswith("-") and cur.strip() != ""
        if cur.strip() and (len(cur) + 1 + len(tok) + 2 > width or starts_option and len(cur) > len(indent) + 40):
            lines.append(cur + " \\")
            cur = indent + "    " + tok
        else:
            cur = f"{cur} {tok}" if cur.strip() else cur + tok
    lines.append(cur)
    stream.write("\n".join(lines) + "\n")


def to_plain(obj: Any) -> Any:
    """Pydantic models, numpy scalars/arrays and tuples -> JSON-ready Python values (no NaN/inf)."""
    if callable(getattr(obj, "model_dump", None)):  # a pydantic model (pydantic is not imported for this)
        return to_plain(obj.model_dump(mode="python", by_alias=True))
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
    """A JSON document: an object opens with ``schema_version`` (qmodel/output_schema.py)."""
    from qmodel.output_schema import SCHEMA_VERSION

    stream = stream or sys.stdout
    doc = to_plain(obj)
    if isinstance(doc, dict):
        doc = {"schema_version": SCHEMA_VERSION, **{k: v for k, v in doc.items() if k != "schema_version"}}
    json.dump(doc, stream, indent=2, sort_keys=False)
    stream.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], stream=None) -> None:
    """An aligned table; numbers right-aligned. Wider than the output width, its widest prose column
    wraps inside the cell (never narrower than 16 columns), so every other cell stays whole; a table
    with no prose column is printed whole."""
    stream = stream or sys.stdout
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    if _state["markdown"]:
        _print_markdown(cells, stream)
        return
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    wrap_col, limit = _column_to_wrap(cells, widths)
    for j, r in enumerate(cells):
        parts = [textwrap.wrap(c, width=limit, break_on_hyphens=False) or [""] if i == wrap_col and j else [c]
                 for i, c in enumerate(r)]
        for k in range(max(len(p) for p in parts)):
            line = [p[k] if k < len(p) else "" for p in parts]
            stream.write("  ".join(c.rjust(w) if j and i != wrap_col and _numeric(c) else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(line, widths))).rstrip() + "\n")
        if j == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")


def print_latencies(res: Any, extra: Sequence[tuple[str, Any]] = (), stream=None) -> None:
    """The mean/p50/p90/p99 table of a result's TTFT, TPOT, TBT (when the scenario names a TPOT
    definition: (e2e - TTFT)/L) and ``extra`` rows, then the share of requests refused beyond the
    context window, if any: what ``solve`` and ``replay`` print alike."""
    from qmodel.units import format_duration

    rows = [("TTFT", res.ttft), ("TPOT", res.tpot)] + ([("TBT", res.tbt)] if res.tbt is not None else [])
    print_table(["metric", "mean", "p50", "p90", "p99"],
                [[name] + [format_duration(getattr(d, k)) for k in ("mean", "p50", "p90", "p99")]
                 for name, d in (*rows, *extra)], stream)
    if res.rejected_fraction:
        say(f"rejected: {res.rejected_fraction:.2%} of requests exceed the context window (counted as SLO misses)",
            stream)


def _print_markdown(cells: list[list[str]], stream) -> None:
    esc = [[c.replace("|", "\\|") for c in r] for r in cells]
    numeric = [bool(cells[1:]) and all(_numeric(r[i]) or not r[i] for r in cells[1:]) for i in range(len(cells[0]))]
    stream.write("| " + " | ".join(esc[0]) + " |\n")
    stream.write("|" + "|".join("---:" if n else "---" for n in numeric) + "|\n")
    for r in esc[1:]:
        stream.write("| " + " | ".join(r) + " |\n")


def _column_to_wrap(cells: list[list[str]], widths: list[int]) -> tuple[int | None, int]:
    """The text column to wrap so the table fits the output width, and its new width (the widths
    list is updated in place); (None, 0) when the table fits or no text column can absorb the excess."""
    width = text_width()
    total = sum(widths) + 2 * (len(widths) - 1)
    if width is None or total <= width:
        return None, 0
    # only prose wraps (a cell of four words or more): names, numbers and short labels stay whole
    text_cols = [i for i in range(len(widths)) if any(len(r[i].split()) >= 4 for r in cells[1:])]
    if not text_cols:
        return None, 0
    col = max(text_cols, key=lambda i: widths[i])
    limit = max(16, len(cells[0][col]), widths[col] - (total - width))
    if limit >= widths[col]:
        return None, 0
    widths[col] = limit
    return col, limit


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


def add_progress_option(p) -> None:
    """``--progress`` / ``--no-progress`` (default: a bar when stderr is a terminal)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def progress_on(args) -> bool:
    """Whether the verb draws its progress bar: the flag if given, else stderr is a terminal."""
    flag = getattr(args, "progress", None)
    return sys.stderr.isatty() if flag is None else bool(flag)


def add_width_option(p) -> None:
    p.add_argument("--wide", action="store_true",
                   help=f"do not wrap text output to {DEFAULT_WIDTH} columns")
    p.add_argument("--markdown", action="store_true",
                   help="print tables as Markdown (for reports and issues); implies --wide")


def add_set_option(p) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a scenario field, e.g. --set deployment.prefill.instances=4 (repeatable)")
