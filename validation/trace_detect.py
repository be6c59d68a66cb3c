"""Trace format detection: the format name of a file from its (inner) suffix and its header or
first record (``format="auto"`` of :func:`qmodel.validation.traces.load_trace`)."""

from __future__ import annotations

import json
from pathlib import Path

from qmodel.errors import DataError
from qmodel.validation.trace_fields import data_lines
from qmodel.validation.trace_readers import FORMATS, csv_header

__all__ = ["detect_format", "inner_suffix"]


def inner_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def detect_format(path: str | Path, text: str) -> str:
    """The format name of a file from its (inner) suffix and its header / first record."""
    p = Path(path)
    suffix = inner_suffix(p)
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
    header = set(csv_header(str(path), text))
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
