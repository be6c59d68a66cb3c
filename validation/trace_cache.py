"""Parsed traces kept on disk, so a fresh process does not parse the same trace file again.

Parsing the Azure conversation CSV (19,366 rows) took ~90 ms of every fresh ``qmodel solve`` of a
trace example; reading back its arrays takes ~2 ms. :func:`qmodel.validation.traces.load_trace`
asks :func:`read` before parsing and hands every trace it parsed to :func:`write`.

**Where and under which name.** ``cache_dir()/traces/<name>.qtr`` (:func:`qmodel.settings.cache_dir`,
``QMODEL_CACHE_DIR`` overrides it). The name is the SHA-256 of the load's identity: the path as given
(after ``data:`` resolution), the resolved real path, and the options that change the result
(``format``, ``on_error``, ``jitter_seed``). One file and one set of options own one entry, so an
edited trace overwrites its entry instead of adding one.

**What is trusted.** Nothing that is not checked. The entry's header repeats the file's size, mtime
(ns) and the SHA-256 of its bytes, which the caller has just read: any difference is a miss (the
bytes are hashed on every load, so an edit that keeps size and mtime is still seen). It also holds
the SHA-256 of the loader's own source (:data:`LOADER_MODULES`) and numpy's
version (the jitter's random stream): a parser fix or a numpy upgrade is a miss, so a fixed parser
is never served the old parser's result. The payload
(the arrays) carries its own SHA-256, checked before use, so a truncated or corrupt entry is a
miss, never a wrong trace. Any failure to read (missing, short, bad magic, bad JSON, wrong layout)
is a miss; the caller parses the file and the entry is rewritten.

**Atomic writes.** An entry is written to a temporary file in the same folder and moved over the
name with ``os.replace``, so a concurrent reader sees the old entry, the new one, or none. A cache
that cannot be written (read-only home) is skipped silently: the cache only saves time.

**Exactness.** The arrays are stored as their raw native bytes and ``meta`` as JSON, which gives back
every float exactly (``repr`` round trip); a trace whose ``meta`` would not come back equal (a value
JSON cannot hold) or whose hash ids do not fit int64 is not cached. Arrays read back are read-only,
as the parser's are.

Layout of an entry: ``MAGIC``, the header length (8 bytes, little-endian), the header (JSON), then the
payload: arrival (float64), prompt and output tokens (int64), and, when the trace has hash ids, the
number of ids per request (int64) and all ids in order (int64).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from qmodel.settings import cache_dir
from qmodel.validation.trace_types import Trace

__all__ = ["MAGIC", "LOADER_MODULES", "code_digest", "entry_path", "read", "write"]

MAGIC = b"QMODEL-TRACE-CACHE 1\n"
_INT64_MAX = 2**63 - 1


def entry_path(path: Path, options: tuple[Any, ...]) -> Path:
    """The cache entry of loading ``path`` with ``options`` (format, on_error, jitter_seed)."""
    ident = json.dumps([MAGIC.decode(), sys.byteorder, str(path), str(path.resolve()), list(options)])
    return cache_dir() / "traces" / f"{hashlib.sha256(ident.encode()).hexdigest()}.qtr"


#: the modules whose code decides what a trace file loads as (their source is part of every stamp;
#: tests/test_trace_cache.py checks this covers every qmodel module the loader imports, less the
#: error classes and the data-folder lookup, which decide no loaded value)
LOADER_MODULES = ("qmodel.validation.traces", "qmodel.validation.trace_assemble", "qmodel.validation.trace_cache",
                  "qmodel.validation.trace_detect", "qmodel.validation.trace_fields",
                  "qmodel.validation.trace_readers", "qmodel.validation.trace_types", "qmodel.arrays")


@functools.cache
def code_digest() -> str | None:
    """SHA-256 of the loader's source files and numpy's version; None (no caching) if a source
    file cannot be found or read."""
    import importlib.util

    h = hashlib.sha256(np.__version__.encode())
    try:
        for name in LOADER_MODULES:
            mod = sys.modules.get(name)
            origin = getattr(mod, "__file__", None) or getattr(importlib.util.find_spec(name), "origin", None)
            h.update(name.encode() + b"\0" + Path(origin).read_bytes())  # type: ignore[arg-type]
    except (OSError, TypeError, ImportError, ValueError):
        return None
    return h.hexdigest()


def _stamp(st: os.stat_result, digest: str) -> dict[str, Any]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest, "code": code_digest()}


def read(entry: Path, source: str, st: os.stat_result, digest: str) -> Trace | None:
    """The trace stored in ``entry`` if it was made from exactly these bytes, else None."""
    if code_digest() is None:
        return None
    try:
        blob = entry.read_bytes()
    except (OSError, ValueError):
        return None
    try:
        return _decode(blob, source, _stamp(st, digest))
    except (ValueError, TypeError, KeyError, IndexError, OverflowError):
        return None


def _decode(blob: bytes, source: str, stamp: dict[str, Any]) -> Trace | None:
    if not blob.startswith(MAGIC):
        return None
    at = len(MAGIC)
    hlen = int.from_bytes(blob[at:at + 8], "little")
    at += 8
    head = json.loads(blob[at:at + hlen].decode("utf-8"))
    at += hlen
    if head["stamp"] != stamp or head["source"] != source:
        return None
    payload = memoryview(blob)[at:]
    if hashlib.sha256(payload).hexdigest() != head["payload_sha256"]:
        return None
    n, n_ids = int(head["n"]), head["n_ids"]
    arrival = np.frombuffer(payload, dtype=np.float64, count=n)
    prompt = np.frombuffer(payload, dtype=np.int64, count=n, offset=8 * n)
    output = np.frombuffer(payload, dtype=np.int64, count=n, offset=16 * n)
    hash_ids = None
    size = 24 * n
    if n_ids is not None:
        per = np.frombuffer(payload, dtype=np.int64, count=n, offset=size).tolist()
        flat = np.frombuffer(payload, dtype=np.int64, count=int(n_ids), offset=size + 8 * n).tolist()
        size += 8 * n + 8 * int(n_ids)
        if sum(per) != n_ids or min(per, default=0) < 0:
            return None
        ends = np.cumsum(per).tolist()
        hash_ids = tuple(tuple(flat[e - k:e]) for k, e in zip(per, ends))
    if size != len(payload):
        return None
    return Trace(arrival, prompt, output, source=source, format=head["format"], sha256=stamp["sha256"],
                 hash_ids=hash_ids, block_tokens=int(head["block_tokens"]), meta=head["meta"])


def write(entry: Path, trace: Trace, st: os.stat_result) -> None:
    """Store ``trace`` (parsed from a file with stat ``st``) in ``entry``; silently skipped when the
    trace cannot be stored exactly or the folder cannot be written."""
    if code_digest() is None:
        return
    try:
        meta_json = json.dumps(trace.meta)
        if json.loads(meta_json) != trace.meta:
            return
    except (TypeError, ValueError):
        return
    parts = [np.ascontiguousarray(trace.arrival_s, dtype=np.float64).tobytes(),
             np.ascontiguousarray(trace.prompt_tokens, dtype=np.int64).tobytes(),
             np.ascontiguousarray(trace.output_tokens, dtype=np.int64).tobytes()]
    n_ids = None
    if trace.hash_ids is not None:
        flat = [h for ids in trace.hash_ids for h in ids]
        if any(not -_INT64_MAX - 1 <= h <= _INT64_MAX for h in flat):
            return
        parts += [np.array([len(ids) for ids in trace.hash_ids], dtype=np.int64).tobytes(),
                  np.array(flat, dtype=np.int64).tobytes()]
        n_ids = len(flat)
    payload = b"".join(parts)
    head = json.dumps({"stamp": _stamp(st, trace.sha256), "source": trace.source, "format": trace.format,
                       "block_tokens": trace.block_tokens, "n": len(trace), "n_ids": n_ids,
                       "payload_sha256": hashlib.sha256(payload).hexdigest()}
                      | {"meta": json.loads(meta_json)}).encode("utf-8")
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(MAGIC + len(head).to_bytes(8, "little") + head + payload)
        os.replace(tmp, entry)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
