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

Parsed traces are cached in memory by (path, mtime, size, options), and on disk for the next
process (:mod:`qmodel.validation.trace_cache`: an entry is used only when the file's size, mtime and
SHA-256 and the entry's own checksum all match); the arrays are read-only so no caller can change a
cached trace under another. ``Trace.sha256`` is the SHA-256 of the file's
bytes as stored (before gunzip).
"""

from __future__ import annotations

import csv
import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from qmodel.errors import DataError, InputError, TraceRowError
from qmodel.settings import missing_file_problem, resolve_data_path
from qmodel.validation import trace_cache
from qmodel.validation.trace_assemble import assemble_trace, decode_text, read_bytes
from qmodel.validation.trace_detect import detect_format, inner_suffix
from qmodel.validation.trace_readers import FORMATS, reader_for
from qmodel.validation.trace_types import Trace

__all__ = [
    "FORMATS",
    "load_trace",
    "detect_format",
    "require_arrivals",
    "write_qmodel_csv",
    "clear_cache",
]

OnError = Literal["report", "skip"]


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
    raw = read_bytes(p)
    digest = hashlib.sha256(raw).hexdigest()
    entry = trace_cache.entry_path(p, (format, on_error, jitter_seed))
    trace = trace_cache.read(entry, str(p), st, digest)
    if trace is None:
        trace = _parse(p, raw, format, on_error, jitter_seed)
        trace_cache.write(entry, trace, st)
    with _LOCK:
        _CACHE[key] = trace
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return trace


def _parse(p: Path, raw: bytes, format: str, on_error: OnError, jitter_seed: int | None) -> Trace:
    text = decode_text(p, raw)
    fmt = detect_format(p, text) if format == "auto" else format
    bad: list[tuple[int, str]] = []
    rows, meta = reader_for(fmt, inner_suffix(p))(str(p), text, bad)
    bad.sort()
    if bad and on_error == "report":
        raise TraceRowError(str(p), bad)
    return assemble_trace(p, raw, fmt, rows, meta, bad, jitter_seed)


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
