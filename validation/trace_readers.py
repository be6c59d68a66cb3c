"""Per-format trace readers: a file's text -> :class:`TraceRow` records and the bad lines.

One reader per format of :mod:`qmodel.validation.traces` (whose docstring gives the formats and the
row rules): the CSV formats (Azure, splitwise, Vidur/ShareGPT, qmodel CSV) read the header and
then one record per line, the JSONL formats (Mooncake, qmodel JSONL) one object per line, and
DistServe one element of a top-level JSON list at a time with the line it starts on. A malformed
row goes to ``bad`` as (line, why); :func:`reader_for` picks the reader of a format.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from qmodel.errors import DataError
from qmodel.validation.trace_fields import (AzureClock, BadRow, csv_fields, data_lines, parse_hash_ids, parse_time,
                                            parse_tokens)

__all__ = ["FORMATS", "BLOCK_TOKENS", "TraceRow", "Reader", "csv_header", "reader_for"]

#: Every format name load_trace accepts (besides "auto").
FORMATS: tuple[str, ...] = ("azure", "mooncake", "splitwise", "vidur", "sharegpt", "distserve", "qmodel")

BLOCK_TOKENS = 512  # Mooncake's (and qmodel's) prefix-block size in tokens


@dataclass
class TraceRow:
    line: int
    arrival_s: float | int | None  # seconds; None for lengths-only formats; Azure holds int ns until all rows are read
    prompt: int
    output: int
    hashes: tuple[int, ...] | None = None


def csv_header(path: str, text: str) -> list[str]:
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
              make: Callable[[int, dict[str, str]], TraceRow], bad: list[tuple[int, str]]) -> list[TraceRow]:
    header = csv_header(path, text)
    cols = _columns(path, header, required, fmt)
    width = len(header)
    rows: list[TraceRow] = []
    for line, fields in _csv_records(text, bad):
        if len(fields) != width:
            bad.append((line, f"expected {width} fields, got {len(fields)}"))
            continue
        try:
            rows.append(make(line, {name: fields[i] for name, i in cols.items()}))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows


def _read_azure(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    clock = AzureClock()

    def make(line: int, f: dict[str, str]) -> TraceRow:
        # Arrival kept in integer ns here; made relative (and float) once all rows are read.
        return TraceRow(line, clock.ns(f["TIMESTAMP"]), parse_tokens(f["ContextTokens"], "ContextTokens"),
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


def _read_splitwise(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    def make(line: int, f: dict[str, str]) -> TraceRow:
        return TraceRow(line, parse_time(f["arrival_timestamp"], "arrival_timestamp"),
                    parse_tokens(f["prompt_size"], "prompt_size"), parse_tokens(f["token_size"], "token_size"))

    return _csv_rows(path, text, "splitwise", ("arrival_timestamp", "prompt_size", "token_size"), make, bad), {}


def _read_vidur(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    has_time = "arrived_at" in csv_header(path, text)

    def make(line: int, f: dict[str, str]) -> TraceRow:
        t = parse_time(f["arrived_at"], "arrived_at") if has_time else None
        return TraceRow(line, t, parse_tokens(f["num_prefill_tokens"], "num_prefill_tokens"),
                    parse_tokens(f["num_decode_tokens"], "num_decode_tokens"))

    return _csv_rows(path, text, "vidur", ("num_prefill_tokens", "num_decode_tokens"), make, bad), {}


def _read_qmodel_csv(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    has_hash = "hash_ids" in csv_header(path, text)

    def make(line: int, f: dict[str, str]) -> TraceRow:
        return TraceRow(line, parse_time(f["arrival_s"], "arrival_s"), parse_tokens(f["prompt_tokens"], "prompt_tokens"),
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


def _read_mooncake(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    rows: list[TraceRow] = []
    for line, obj in _jsonl_objects(text, bad):
        try:
            _need(obj, "timestamp", "input_length", "output_length")
            hashes = parse_hash_ids(obj["hash_ids"]) if "hash_ids" in obj else None
            rows.append(TraceRow(line, parse_time(obj["timestamp"], "timestamp", 1e-3), parse_tokens(obj["input_length"], "input_length"),
                             parse_tokens(obj["output_length"], "output_length"), hashes))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows, {}


def _read_qmodel_jsonl(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    rows: list[TraceRow] = []
    for line, obj in _jsonl_objects(text, bad):
        try:
            _need(obj, "arrival_s", "prompt_tokens", "output_tokens")
            hashes = parse_hash_ids(obj["hash_ids"]) if obj.get("hash_ids") is not None else None
            rows.append(TraceRow(line, parse_time(obj["arrival_s"], "arrival_s"), parse_tokens(obj["prompt_tokens"], "prompt_tokens"),
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


def _read_distserve(path: str, text: str, bad: list[tuple[int, str]]) -> tuple[list[TraceRow], dict]:
    rows: list[TraceRow] = []
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
            rows.append(TraceRow(line, None, parse_tokens(p, "prompt_len"), parse_tokens(d, "decode_len")))
        except BadRow as why:
            bad.append((line, str(why)))
    return rows, {}


Reader = Callable[[str, str, list[tuple[int, str]]], tuple[list[TraceRow], dict]]


def reader_for(fmt: str, suffix: str) -> Reader:
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
