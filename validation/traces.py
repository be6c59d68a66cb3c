"""Trace loaders: public LLM-serving traces and qmodel's own format -> :class:`Trace`.

``load_trace(path, format="auto")`` reads one file and returns requests sorted by arrival, with
``arrival_s`` in seconds from the first arrival. Formats (``format=`` name, how ``auto`` spots it):

``azure``      Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``.
               TIMESTAMP is a naive wall-clock string ``YYYY-MM-DD HH:MM:SS.fffffff`` (7 fractional
               digits); it is parsed exactly in integer nanoseconds, then made relative to the
               first row. The files end without a trailing newline (handled).
``mooncake``   Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
               (prefix-block ids, 512-token blocks). The conversation trace's arrivals are
               quantised to ~3 s slots; ``jitter_seed=`` spreads each slot's requests uniformly
               over the slot (see below), otherwise they are kept as batches.
``splitwise``  splitwise-sim trace CSV: ``request_id,request_type,application_id,arrival_timestamp,
               batch_size,prompt_size,token_size`` (arrival_timestamp in seconds); only
               ``arrival_timestamp``, ``prompt_size``, ``token_size`` are required.
``vidur``      Vidur CSV: ``num_prefill_tokens,num_decode_tokens[,arrived_at]`` (arrived_at in s).
``sharegpt``   the same column layout for the ShareGPT length file in ``length_distributions/``
               (auto picks this name when the file name contains "sharegpt").
``distserve``  DistServe-style JSON list of ``[prompt_len, decode_len]`` pairs (also
               ``[prompt, prompt_len, decode_len]`` triples as in DistServe's datasets, or objects
               with ``prompt_len`` and ``output_len``/``decode_len``).
``qmodel``     qmodel's own CSV or JSONL: ``arrival_s,prompt_tokens,output_tokens[,hash_ids]``;
               in CSV, ``hash_ids`` is a space-separated list of integers (or a quoted JSON list);
               blocks are 512 tokens; lines starting with ``#`` are comments.

A ``.gz`` suffix is read through gzip, the format coming from the inner suffix.

**Lengths-only traces.** Vidur/ShareGPT length files and DistServe lists have no arrival times.
They load with ``arrival_s`` all zeros and ``meta["lengths_only"] = True``: they are a length
mix, not an arrival process. Use them as ``lengths: {kind: empirical}`` with Poisson/Gamma
arrivals; :func:`require_arrivals` turns an attempt to take arrivals from them into one clear
InputError.

**Rows are lines.** A CSV or JSONL request is one physical line (the files are machine-written; no
field spans lines), so a bad line cannot swallow the lines after it: each line after the header
that is not blank or a ``#`` comment is either loaded or reported with its own line number, and
loaded + reported = the rows in the file. (An unterminated quote or an over-long field is that
line's error; :mod:`csv` reading the whole text would run on to the end of the file, or stop
at its 131,072-character field limit.)

**Malformed rows** (wrong field count, bad CSV quoting, non-numbers, token counts < 1, negative
or non-finite times, bad hash ids, invalid JSON) are never dropped silently. With
``on_error="report"`` (default) a :class:`~qmodel.errors.TraceRowError` lists every bad line
number (physical, 1-based, the header is line 1). With ``on_error="skip"`` they are left out and
recorded in ``meta["skipped_lines"]`` (line numbers) and ``meta["skipped"]`` ("line N: why"
strings). Errors quote at most a short field value, never a header or a line: a ``data:`` or
scenario path may name a file that is not a trace at all, and its content must not leak.

**Order.** Rows out of time order are stably sorted (``meta["resorted"] = True``); the file order
of equal timestamps is kept.

**Jitter** (``jitter_seed``): each distinct timestamp is a slot reaching to the next distinct
timestamp (the last slot gets the median slot width). Its requests get sorted uniform offsets in
the slot from ``numpy.random.default_rng(jitter_seed)``, assigned in file order, so the request
order is kept and the result is deterministic. Times restart at 0; ``meta["jitter_shift_s"]`` is the
first request's offset that was taken off.

Parsed traces are cached in memory by (path, mtime, size, options); the arrays are read-only so
no caller can change a cached trace under another. ``Trace.sha256`` is the SHA-256 of the file's
bytes as stored (before gunzip).
"""

from __future__ import annotations

import csv
import datetime as _dt
import gzip
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from qmodel.errors import DataError, InputError, TraceRowError
from qmodel.validation.trace_fields import (AzureClock, BadRow, csv_fields, data_lines, parse_hash_ids, parse_time,
                                            parse_tokens)
from qmodel.settings import missing_file_problem, resolve_data_path
from qmodel.validation.trace_types import Trace

__all__ = [
    "FORMATS",
    "load_trace",
    "detect_format",
    "require_arrivals",
    "write_qmodel_csv",
    "clear_cache",
]

#: Every format name load_trace accepts (besides "auto").
FORMATS: tuple[str, ...] = ("azure", "mooncake", "splitwise", "vidur", "sharegpt", "distserve", "qmodel")

OnError = Literal["report", "skip"]

_BLOCK_TOKENS = 512  # Mooncake's (and qmodel's) prefix-block size in tokens


@dataclass
class _Row:
    line: int
    arrival_s: float | int | None  # seconds; None for lengths-only formats; Azure holds int ns until all rows are read
    prompt: int
    output: int
    hashes: tuple[int, ...] | None = None


# ---- readers per format -------------------------------------------------------------------------

def _csv_header(path: str, text: str) -> list[str]:
    """The column names (the first line that is not blank or a comment); [] for an empty file."""
    for number, line in data_lines(text):
        try:
            return [f.strip() for f in csv_fields(line)]
        except BadRow as why:
            raise DataError(path, f"line {number} (the header): {why}") from None
    return []


def _csv_records(text: str, bad: list[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each data line after the header; lines that are not CSV go to ``bad``."""
    lines = data_lines(text)
    next(lines, None)  # the header
    for number, line in lines:
        try:
            yield number, csv_fields(line)
        except BadRow as why:
            bad.append((number, str(why)))


def _columns(path: str, header: list[str], required: Sequence[str], fmt: str) -> dict[str, int]:
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(path, f"not a {fmt} trace: missing column(s) {', '.join(missing)}")
    return {name: i for i, name in enumerate(header)}


def _csv_rows(path: str, text: str, fmt: str, required: Sequence[str],
              make: Callable[[int, dict[str, str]], _Row], bad: list[tuple[int, str]]) -> list[_Row]:
    header = _csv_header(path, text)
    cols = _columns(path, header, required, fmt)
    width = len(header)
    rows: list[_Row] = []
    for line, fields in _csv_records(text, bad):
        if len(fields) != width:
            bad.append((line, f"expected {width} fields, got {len(fields)}"))
            continue
        try:
            rows.append(make(line, {name: fields[i] for name, i in cols.items()}))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows


def _read_azure(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    clock = AzureClock()

    def make(line: int, f: dict[str, str]) -> _Row:
        # Arrival kept in integer ns here; made relative (and float) once all rows are read.
        return _Row(line, clock.ns(f["TIMESTAMP"]), parse_tokens(f["ContextTokens"], "ContextTokens"),
                    parse_tokens(f["GeneratedTokens"], "GeneratedTokens"))

    rows = _csv_rows(path, text, "azure", ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), make, bad)
    meta: dict[str, Any] = {}
    if rows:
        first = min(r.arrival_s for r in rows)  # type: ignore[type-var]
        day, rest = divmod(first, 86_400_000_000_000)
        start = _dt.datetime.fromordinal(day) + _dt.timedelta(microseconds=rest // 1000)
        meta["first_timestamp"] = start.isoformat(sep=" ")
        for r in rows:
            r.arrival_s = (r.arrival_s - first) / 1e9  # type: ignore[operator]
    return rows, meta


def _read_splitwise(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    def make(line: int, f: dict[str, str]) -> _Row:
        return _Row(line, parse_time(f["arrival_timestamp"], "arrival_timestamp"),
                    parse_tokens(f["prompt_size"], "prompt_size"), parse_tokens(f["token_size"], "token_size"))

    return _csv_rows(path, text, "splitwise", ("arrival_timestamp", "prompt_size", "token_size"), make, bad), {}


def _read_vidur(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    has_time = "arrived_at" in _csv_header(path, text)

    def make(line: int, f: dict[str, str]) -> _Row:
        t = parse_time(f["arrived_at"], "arrived_at") if has_time else None
        return _Row(line, t, parse_tokens(f["num_prefill_tokens"], "num_prefill_tokens"),
                    parse_tokens(f["num_decode_tokens"], "num_decode_tokens"))

    return _csv_rows(path, text, "vidur", ("num_prefill_tokens", "num_decode_tokens"), make, bad), {}


def _read_qmodel_csv(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    has_hash = "hash_ids" in _csv_header(path, text)

    def make(line: int, f: dict[str, str]) -> _Row:
        return _Row(line, parse_time(f["arrival_s"], "arrival_s"), parse_tokens(f["prompt_tokens"], "prompt_tokens"),
                    parse_tokens(f["output_tokens"], "output_tokens"),
                    parse_hash_ids(f["hash_ids"]) if has_hash else None)

    return _csv_rows(path, text, "qmodel", ("arrival_s", "prompt_tokens", "output_tokens"), make, bad), {}


def _jsonl_objects(text: str, bad: list[tuple[int, str]]) -> Iterator[tuple[int, dict]]:
    # Lines split at "\n" only: str.splitlines would also split at U+2028 and the like, which
    # JSON strings may hold unescaped, and then misnumber every later line.
    for line, raw in data_lines(text):
        s = raw.strip()
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as err:
            bad.append((line, f"not valid JSON ({err.msg})"))
            continue
        if not isinstance(obj, dict):
            bad.append((line, "not a JSON object"))
            continue
        yield line, obj


def _need(obj: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise BadRow(f"missing key(s) {', '.join(missing)}")


def _read_mooncake(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    rows: list[_Row] = []
    for line, obj in _jsonl_objects(text, bad):
        try:
            _need(obj, "timestamp", "input_length", "output_length")
            hashes = parse_hash_ids(obj["hash_ids"]) if "hash_ids" in obj else None
            rows.append(_Row(line, parse_time(obj["timestamp"], "timestamp", 1e-3), parse_tokens(obj["input_length"], "input_length"),
                             parse_tokens(obj["output_length"], "output_length"), hashes))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows, {}


def _read_qmodel_jsonl(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    rows: list[_Row] = []
    for line, obj in _jsonl_objects(text, bad):
        try:
            _need(obj, "arrival_s", "prompt_tokens", "output_tokens")
            hashes = parse_hash_ids(obj["hash_ids"]) if obj.get("hash_ids") is not None else None
            rows.append(_Row(line, parse_time(obj["arrival_s"], "arrival_s"), parse_tokens(obj["prompt_tokens"], "prompt_tokens"),
                             parse_tokens(obj["output_tokens"], "output_tokens"), hashes))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows, {}


def _json_list_items(path: str, text: str) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level JSON list with the line each starts on (so errors can name lines)."""
    dec = json.JSONDecoder()
    ws = re.compile(r"\s*")
    idx = ws.match(text, 0).end()  # type: ignore[union-attr]
    if idx >= len(text) or text[idx] != "[":
        raise DataError(path, "not a DistServe trace: the top level must be a JSON list of [prompt_len, decode_len] pairs")
    idx += 1
    line, counted = 1, 0
    while True:
        idx = ws.match(text, idx).end()  # type: ignore[union-attr]
        if idx < len(text) and text[idx] == "]":
            return
        line += text.count("\n", counted, idx)
        counted = idx
        try:
            obj, end = dec.raw_decode(text, idx)
        except json.JSONDecodeError as err:
            raise DataError(path, f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
        yield line, obj
        idx = ws.match(text, end).end()  # type: ignore[union-attr]
        if idx < len(text) and text[idx] == ",":
            idx += 1
        elif idx < len(text) and text[idx] == "]":
            return
        else:
            ln = text.count("\n", 0, idx) + 1
            raise DataError(path, f"not valid JSON at line {ln}: expected ',' or ']' in the list")


def _read_distserve(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[_Row], dict]:
    rows: list[_Row] = []
    for line, item in _json_list_items(path, text):
        try:
            if isinstance(item, list) and len(item) in (2, 3):
                p, d = item[-2], item[-1]  # [p, d] or DistServe's [prompt_text, p, d]
            elif isinstance(item, dict):
                if "prompt_len" not in item:
                    raise BadRow("missing key prompt_len")
                d_key = "output_len" if "output_len" in item else "decode_len"
                if d_key not in item:
                    raise BadRow("missing key output_len (or decode_len)")
                p, d = item["prompt_len"], item[d_key]
            else:
                raise BadRow("expected [prompt_len, decode_len]")
            rows.append(_Row(line, None, parse_tokens(p, "prompt_len"), parse_tokens(d, "decode_len")))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows, {}


_Reader = Callable[[str, str, list[tuple[int, str]]], tuple[list[_Row], dict]]


def _reader_for(fmt: str, suffix: str) -> _Reader:
    if fmt == "qmodel":
        return _read_qmodel_jsonl if suffix in (".jsonl", ".json") else _read_qmodel_csv
    return {
        "azure": _read_azure,
        "mooncake": _read_mooncake,
        "splitwise": _read_splitwise,
        "vidur": _read_vidur,
        "sharegpt": _read_vidur,
        "distserve": _read_distserve,
    }[fmt]


# ---- detection ----------------------------------------------------------------------------------

def _inner_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def detect_format(path: str | Path, text: str) -> str:
    """The format name of a file from its (inner) suffix and its header / first record."""
    p = Path(path)
    suffix = _inner_suffix(p)
    if suffix in (".jsonl", ".json"):
        # The first line that is a JSON object tells the format; bad lines before it are left to the
        # reader, which reports each with its line number.
        first_bad = None
        for number, line in data_lines(text):
            if first_bad is None and line.lstrip().startswith("["):
                return "distserve"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                first_bad = first_bad or number
                continue
            if "input_length" in obj and "timestamp" in obj:
                return "mooncake"
            if "arrival_s" in obj:
                return "qmodel"
            where = f"the record at line {number}"
            break
        else:
            where = f"any line (line {first_bad} is not a JSON object)" if first_bad else "an empty file"
        raise DataError(str(path), f"cannot tell the trace format from {where}; expected Mooncake "
                                   "(timestamp, input_length, output_length), qmodel (arrival_s, prompt_tokens, "
                                   "output_tokens) or a DistServe list; pass --format")
    header = set(_csv_header(str(path), text))
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    if {"arrival_timestamp", "prompt_size", "token_size"} <= header:
        return "splitwise"
    if {"num_prefill_tokens", "num_decode_tokens"} <= header:
        return "sharegpt" if "sharegpt" in p.name.lower() else "vidur"
    if {"arrival_s", "prompt_tokens", "output_tokens"} <= header:
        return "qmodel"
    raise DataError(str(path), f"cannot tell the trace format from the header ({len(header)} column(s), none of "
                               f"the known sets); known formats: {', '.join(FORMATS)}; pass --format")


# ---- assembly -----------------------------------------------------------------------------------

def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(str(path), missing_file_problem(path, "trace file")) from None
    except IsADirectoryError:
        raise DataError(str(path), "is a folder, not a trace file") from None
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror})") from None


def _decode(path: Path, raw: bytes) -> str:
    if path.suffix.lower() == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise DataError(str(path), f"not a readable gzip file ({err})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(str(path), f"not UTF-8 text (byte {err.start})") from None


def _jitter(arrival: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """Spread requests sharing a timestamp uniformly over their slot (see the module docstring).

    Returns the jittered times restarted at 0 and the shift taken off (the first request's offset).
    """
    slots, idx = np.unique(arrival, return_inverse=True)
    if len(slots) < 2:
        return arrival.copy(), 0.0
    widths = np.diff(slots)
    widths = np.append(widths, np.median(widths))
    rng = np.random.default_rng(seed)
    offs = rng.random(len(arrival)) * widths[idx]
    # Sorting offsets within each slot and handing them out in file order keeps the request order.
    order = np.lexsort((offs, idx))
    out = slots[idx] + offs[order]
    return out - out[0], float(out[0])


def _assemble(path: Path, raw: bytes, fmt: str, rows: list[_Row], meta: dict, skipped: list[tuple[int, str]],
              jitter_seed: int | None) -> Trace:
    if not rows:
        raise DataError(str(path), "no requests in the file" if not skipped else
                        f"no valid requests ({len(skipped)} malformed row(s), first at line {skipped[0][0]})")
    n = len(rows)
    lengths_only = rows[0].arrival_s is None
    prompt = np.fromiter((r.prompt for r in rows), dtype=np.int64, count=n)
    output = np.fromiter((r.output for r in rows), dtype=np.int64, count=n)
    have_hash = any(r.hashes is not None for r in rows)
    hashes = tuple(r.hashes if r.hashes is not None else () for r in rows) if have_hash else None
    meta = dict(meta)
    if lengths_only:
        arrival = np.zeros(n, dtype=np.float64)
        meta["lengths_only"] = True
    else:
        arrival = np.fromiter((r.arrival_s for r in rows), dtype=np.float64, count=n)
        meta["lengths_only"] = False
        if np.any(np.diff(arrival) < 0):
            order = np.argsort(arrival, kind="stable")
            arrival, prompt, output = arrival[order], prompt[order], output[order]
            if hashes is not None:
                hashes = tuple(hashes[i] for i in order)
            meta["resorted"] = True
        meta["time_offset_s"] = float(arrival[0])
        arrival = arrival - arrival[0]
        meta["distinct_arrivals"] = int(len(np.unique(arrival)))
        if jitter_seed is not None:
            arrival, meta["jitter_shift_s"] = _jitter(arrival, int(jitter_seed))
            meta["jitter_seed"] = int(jitter_seed)
    if jitter_seed is not None and lengths_only:
        raise InputError("jitter_seed", jitter_seed, "only traces with arrival times can be jittered")
    if skipped:
        meta["skipped_lines"] = [ln for ln, _ in skipped]
        meta["skipped"] = [f"line {ln}: {why}" for ln, why in skipped]
    for a in (arrival, prompt, output):
        a.flags.writeable = False
    return Trace(arrival, prompt, output, source=str(path), format=fmt,
                 sha256=hashlib.sha256(raw).hexdigest(), hash_ids=hashes, block_tokens=_BLOCK_TOKENS, meta=meta)


# ---- public API ---------------------------------------------------------------------------------

_CACHE: OrderedDict[tuple, Trace] = OrderedDict()
_CACHE_MAX = 16
_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every parsed trace (tests; long sessions that edit trace files)."""
    with _LOCK:
        _CACHE.clear()


def load_trace(path: str | Path, format: str = "auto", *, on_error: OnError = "report",
               jitter_seed: int | None = None) -> Trace:
    """Load a trace file (see the module docstring for formats and options).

    ``path`` may be ``data:REL`` (under :func:`qmodel.settings.data_dir`). Raises
    :class:`~qmodel.errors.DataError` for unreadable or unrecognised files and
    :class:`~qmodel.errors.TraceRowError` (listing line numbers) for malformed rows unless
    ``on_error="skip"``.
    """
    if format != "auto" and format not in FORMATS:
        raise InputError("format", format, f"use auto or one of {', '.join(FORMATS)}")
    if on_error not in ("report", "skip"):
        raise InputError("on_error", on_error, "use 'report' or 'skip'")
    p = resolve_data_path(str(path))
    try:
        st = p.stat()
    except FileNotFoundError:
        raise DataError(str(path), missing_file_problem(p, "trace file")) from None
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror})") from None
    except ValueError:  # an embedded NUL: no file can have that name
        raise DataError(repr(str(path)), "not a usable file name") from None
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size, format, on_error, jitter_seed)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    raw = _read_bytes(p)
    text = _decode(p, raw)
    fmt = detect_format(p, text) if format == "auto" else format
    bad: list[tuple[int, str]] = []
    rows, meta = _reader_for(fmt, _inner_suffix(p))(str(p), text, bad)
    bad.sort()
    if bad and on_error == "report":
        raise TraceRowError(str(p), bad)
    trace = _assemble(p, raw, fmt, rows, meta, bad, jitter_seed)
    with _LOCK:
        _CACHE[key] = trace
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return trace


def require_arrivals(trace: Trace, field: str = "workload.arrivals.path") -> Trace:
    """The trace itself if it has arrival times; an InputError naming the field if it is lengths-only."""
    if trace.meta.get("lengths_only"):
        raise InputError(field, trace.source, f"this {trace.format} file has no arrival times (lengths only); "
                                              "use it as 'lengths: {kind: empirical}' with poisson or gamma arrivals")
    return trace


def write_qmodel_csv(trace: Trace, path: str | Path) -> Path:
    """Write a trace in qmodel's CSV format (``arrival_s,prompt_tokens,output_tokens[,hash_ids]``).

    Times are written with ``repr`` precision so a round trip gives identical arrays.
    """
    p = Path(path)
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        cols = ["arrival_s", "prompt_tokens", "output_tokens"] + (["hash_ids"] if trace.hash_ids is not None else [])
        w.writerow(cols)
        for i in range(len(trace)):
            row: list[Any] = [repr(float(trace.arrival_s[i])), int(trace.prompt_tokens[i]), int(trace.output_tokens[i])]
            if trace.hash_ids is not None:
                row.append(" ".join(str(h) for h in trace.hash_ids[i]))
            w.writerow(row)
    return p

