"""Trace fields and lines: the parsing below :mod:`qmodel.validation.traces`' per-format readers.

A request is one physical line (see that module's docstring): :func:`data_lines` numbers the lines
that are not blank or ``#`` comments, splitting at ``\\n`` only (``str.splitlines`` also splits at
U+2028 and the like, which a JSON string may hold, and would misnumber every later line), and
:func:`csv_fields` splits one CSV line, so bad quoting stays that line's error. The field parsers
raise :class:`BadRow` with a reason that quotes at most 40 characters of the value
(:func:`show_value`): an error names the bad field, never a whole line of a file.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_TOKENS", "BadRow", "show_value", "parse_tokens", "parse_time", "parse_hash_ids", "AzureClock", "data_lines",
           "csv_fields"]


#: The largest token count a row may hold: engines index tokens in int32, and below it the int64
#: arrays a Trace holds (and sums and squares of lengths) cannot overflow.
MAX_TOKENS = 2**31 - 1


class BadRow(Exception):
    """One malformed row: the reason, later tagged with its line number."""


def show_value(value: Any) -> str:
    """``repr(value)``, cut to 40 characters: an error names the bad field, not a whole line."""
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def parse_tokens(value: Any, name: str) -> int:
    """A token count: a whole number in [1, MAX_TOKENS] (``"12"``, ``12``, ``12.0``)."""
    if isinstance(value, bool):
        raise BadRow(f"{name} {show_value(value)} is not a whole number")
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip()
        try:
            n = int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                raise BadRow(f"{name} {show_value(value)} is not a number") from None
            if not math.isfinite(f) or f != int(f):
                raise BadRow(f"{name} {show_value(value)} is not a whole number")
            n = int(f)
    if n < 1:
        raise BadRow(f"{name} {show_value(value)} must be at least 1")
    if n > MAX_TOKENS:
        raise BadRow(f"{name} {show_value(value)} is more than {MAX_TOKENS:,} tokens")
    return n


def parse_time(value: Any, name: str, scale: float = 1.0) -> float:
    """A finite, non-negative time, multiplied by ``scale`` to get seconds."""
    if isinstance(value, bool):
        raise BadRow(f"{name} {show_value(value)} is not a number")
    try:
        f = float(value if not isinstance(value, str) else value.strip())
    except (TypeError, ValueError):
        raise BadRow(f"{name} {show_value(value)} is not a number") from None
    if not math.isfinite(f):
        raise BadRow(f"{name} {show_value(value)} is not finite")
    if f < 0:
        raise BadRow(f"{name} {show_value(value)} is negative")
    return f * scale


def parse_hash_ids(value: Any, name: str = "hash_ids") -> tuple[int, ...]:
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                value = json.loads(s)
            except json.JSONDecodeError:
                raise BadRow(f"{name} {show_value(value)} is not a JSON list of integers") from None
        else:
            parts = [p for p in re.split(r"[\s;]+", s) if p]
            try:
                return tuple(int(p) for p in parts)
            except ValueError:
                raise BadRow(f"{name} {show_value(value)} is not a space-separated list of integers") from None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise BadRow(f"{name} must be a list of integers")
    return tuple(value)


_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


class AzureClock:
    """Wall-clock strings -> integer nanoseconds since 0001-01-01 (exact; no float rounding)."""

    def __init__(self) -> None:
        self._days: dict[tuple[str, str, str], int] = {}

    def ns(self, text: str) -> int:
        m = _TIMESTAMP.fullmatch(text.strip())
        if not m:
            raise BadRow(f"TIMESTAMP {show_value(text)} is not 'YYYY-MM-DD HH:MM:SS.fffffff'")
        y, mo, d, hh, mm, ss, frac = m.groups()
        day_key = (y, mo, d)  # the parsed date, not the raw text (which may carry leading blanks)
        day = self._days.get(day_key)
        if day is None:
            try:
                day = _dt.date(int(y), int(mo), int(d)).toordinal()
            except ValueError:
                raise BadRow(f"TIMESTAMP {show_value(text)} is not a calendar date") from None
            self._days[day_key] = day
        h, mi, s = int(hh), int(mm), int(ss)
        if h > 23 or mi > 59 or s > 59:
            raise BadRow(f"TIMESTAMP {show_value(text)} is not a valid time of day")
        frac_ns = int((frac or "0").ljust(9, "0"))
        return ((day * 86400 + h * 3600 + mi * 60 + s) * 1_000_000_000) + frac_ns


def data_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each physical line that is not blank or a ``#`` comment."""
    for number, raw in enumerate(io.StringIO(text), start=1):
        line = raw.rstrip("\r\n")
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def csv_fields(line: str) -> list[str]:
    """The fields of one CSV line; a quoting error or an over-long quoted field is this line's BadRow."""
    if '"' not in line:
        return line.split(",")  # no quoting: the fields are exactly the comma-separated parts
    try:
        return next(csv.reader([line], strict=True))
    except csv.Error as err:
        raise BadRow(f"not valid CSV ({err})") from None
