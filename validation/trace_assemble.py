"""From a trace file's bytes and parsed rows to a :class:`~qmodel.validation.trace_types.Trace`.

:func:`read_bytes` and :func:`decode_text` read the file (gzip, UTF-8) with one-line errors;
:func:`assemble_trace` builds the read-only arrays, stably resorts rows out of time order, makes times
relative to the first arrival and applies the jitter (:func:`jitter_arrivals`), as described in
:mod:`qmodel.validation.traces`.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np

from qmodel.arrays import distinct, median
from qmodel.errors import DataError, InputError
from qmodel.settings import missing_file_problem
from qmodel.validation.trace_readers import BLOCK_TOKENS, TraceRow
from qmodel.validation.trace_types import Trace

__all__ = ["read_bytes", "decode_text", "jitter_arrivals", "assemble_trace"]


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(str(path), missing_file_problem(path, "trace file")) from None
    except IsADirectoryError:
        raise DataError(str(path), "is a folder, not a trace file") from None
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror})") from None


def decode_text(path: Path, raw: bytes) -> str:
    if path.suffix.lower() == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise DataError(str(path), f"not a readable gzip file ({err})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(str(path), f"not UTF-8 text (byte {err.start})") from None


def jitter_arrivals(arrival: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """Spread requests sharing a timestamp uniformly over their slot (see :mod:`qmodel.validation.traces`).

    Returns the jittered times restarted at 0 and the shift taken off (the first request's offset).
    """
    slots, idx = np.unique(arrival, return_inverse=True)
    if len(slots) < 2:
        return arrival.copy(), 0.0
    widths = np.diff(slots)
    widths = np.append(widths, median(widths))
    rng = np.random.default_rng(seed)
    offs = rng.random(len(arrival)) * widths[idx]
    # Sorting offsets within each slot and handing them out in file order keeps the request order.
    order = np.lexsort((offs, idx))
    out = slots[idx] + offs[order]
    return out - out[0], float(out[0])


def assemble_trace(path: Path, raw: bytes, fmt: str, rows: list[TraceRow], meta: dict, skipped: list[tuple[int, str]],
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
        meta["distinct_arrivals"] = int(len(distinct(arrival)))
        if jitter_seed is not None:
            arrival, meta["jitter_shift_s"] = jitter_arrivals(arrival, int(jitter_seed))
            meta["jitter_seed"] = int(jitter_seed)
    if jitter_seed is not None and lengths_only:
        raise InputError("jitter_seed", jitter_seed, "only traces with arrival times can be jittered")
    if skipped:
        meta["skipped_lines"] = [ln for ln, _ in skipped]
        meta["skipped"] = [f"line {ln}: {why}" for ln, why in skipped]
    for a in (arrival, prompt, output):
        a.flags.writeable = False
    return Trace(arrival, prompt, output, source=str(path), format=fmt,
                 sha256=hashlib.sha256(raw).hexdigest(), hash_ids=hashes, block_tokens=BLOCK_TOKENS, meta=meta)
