"""Readers for the measured step-time tables: splitwise-sim CSV, DistServe profiler JSON, qmodel CSV.

Formats
-------
**splitwise-sim** ``perf_model.csv`` (``model, hardware, prompt_size, batch_size, token_size, ...,
prompt_time, token_time, ..., tensor_parallel``): ``prompt_time`` is the prefill time of the whole
batch in ms, ``token_time`` the mean decode iteration in ms over ``token_size`` iterations. Each
setting is repeated; qmodel takes the median of the repeats. A decode row's mean context per
sequence is ``prompt_size + token_size / 2`` (the context grows from ``prompt_size`` by one token
per iteration). Names map to the catalog: llama2-70b -> llama-2-70b, bloom-176b -> bloom-176b,
a100-80gb -> a100-80gb-sxm, h100-80gb -> h100-sxm; the power-capped ``h100-80gb-pcap`` is chosen
with ``hardware_key``.

**DistServe** ``profiler-<gpu>.<engine>.json``: ``{model: {tp: {"prefill": [a, b, c],
"decoding_smallbs": [a, b, c], "decoding_largebs": [a, b, c], "decoding_large_small_bs_threshold":
B0}}}`` with times in ms (:class:`DistServeModel`).

**qmodel CSV** (write your own measurements in this form)::

    # lines starting with '#' are comments
    phase,batch_size,prompt_tokens,context_tokens,time_s[,model,hardware,tp]
    prefill,1,512,,0.0943
    prefill,8,512,,0.7676
    decode,1,,576,0.0449
    decode,32,,576,0.0530

``phase`` is ``prefill`` (``batch_size`` requests of ``prompt_tokens`` each; ``time_s`` for the whole
batch) or ``decode`` (``batch_size`` sequences of mean context ``context_tokens``; ``time_s`` for one
iteration). Repeated settings are reduced to their median. The optional ``model``, ``hardware`` and
``tp`` columns let one file hold several configurations (selected with ``model_key``,
``hardware_key`` and the deployment's tp). Requirements: prefill rows at batch size 1 for at least
two prompt lengths; decode rows for at least two batch sizes.


Every table model records the SHA-256 of the file bytes as its ``fingerprint``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import numpy as np

from qmodel.errors import DataError, InputError
from qmodel.perf.grid import GridTableModel
from qmodel.perf.table_distserve import DistServeModel
from qmodel.perf.table_header import LAYOUTS, parse_header
from qmodel.perf.table_sweep import SweepTableModel
from qmodel.settings import missing_file_problem

__all__ = [
    "SPLITWISE_MODELS",
    "SPLITWISE_HARDWARE",
    "DISTSERVE_MODELS",
    "DISTSERVE_HARDWARE",
    "sha256_hex",
    "read_table_bytes",
    "load_splitwise",
    "load_distserve",
    "load_qmodel_csv",
    "detect_format",
]

#: catalog model name -> splitwise-sim model key
SPLITWISE_MODELS: dict[str, str] = {"llama-2-70b": "llama2-70b", "bloom-176b": "bloom-176b"}
#: catalog GPU name -> splitwise-sim hardware key (h100-80gb-pcap, power-capped, only via hardware_key)
SPLITWISE_HARDWARE: dict[str, str] = {"a100-80gb-sxm": "a100-80gb", "h100-sxm": "h100-80gb"}
#: catalog model name -> DistServe model key
DISTSERVE_MODELS: dict[str, str] = {"opt-13b": "facebook/opt-13b", "opt-66b": "facebook/opt-66b",
                                    "opt-175b": "facebook/opt-175b"}
#: DistServe file-name GPU tag -> catalog GPU name
DISTSERVE_HARDWARE: dict[str, str] = {"a100-80g": "a100-80gb-sxm"}


def sha256_hex(data: bytes) -> str:
    """The SHA-256 (hex) of a table file's bytes: the table model's fingerprint."""
    return hashlib.sha256(data).hexdigest()


def read_table_bytes(path: str | Path) -> bytes:
    """A table file's bytes; a missing or unreadable file is one DataError naming it."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise DataError(str(p), missing_file_problem(p)) from None
    except OSError as err:
        raise DataError(str(p), f"cannot read ({err.strerror})") from None
    except ValueError:  # an embedded NUL: no file can have that name
        raise DataError(repr(str(p)), "not a usable file name") from None



def _csv_rows(data: bytes, path: str) -> list[dict[str, str]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(path, "not UTF-8 text") from None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def _num(row: dict[str, str], col: str, path: str, line: int) -> float:
    try:
        v = float(row[col])
    except (KeyError, TypeError, ValueError):
        raise DataError(path, f"row {line}: column {col!r} is {row.get(col)!r}, expected a number") from None
    if not np.isfinite(v) or v < 0:
        raise DataError(path, f"row {line}: column {col!r} is {v!r}, expected a finite non-negative number")
    return v


def load_splitwise(path: str | Path, model_key: str, hardware_key: str, tp: int,
                   field_prefix: str = "deployment") -> SweepTableModel:
    """Load one (model, hardware, tp) group of splitwise-sim's ``perf_model.csv``."""
    data = read_table_bytes(path)
    rows = _csv_rows(data, str(path))
    need = {"model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "tensor_parallel"}
    if not rows or not need <= set(rows[0]):
        raise DataError(str(path), f"not a splitwise-sim perf_model.csv (needs columns {sorted(need)})")
    models = sorted({r["model"] for r in rows})
    if model_key not in models:
        raise InputError("perf.model_key", model_key, f"models in {Path(path).name}: {', '.join(models)}")
    hws = sorted({r["hardware"] for r in rows if r["model"] == model_key})
    if hardware_key not in hws:
        raise InputError("perf.hardware_key", hardware_key, f"hardware for {model_key}: {', '.join(hws)}")
    sel = [(i + 2, r) for i, r in enumerate(rows) if r["model"] == model_key and r["hardware"] == hardware_key]
    tps = sorted({int(float(r["tensor_parallel"])) for _, r in sel})
    if tp not in tps:
        raise InputError(f"{field_prefix}.tp", tp, f"the table measures {model_key} on {hardware_key} at tp "
                                                   f"{', '.join(map(str, tps))}")
    pre, dec = [], []
    for line, r in sel:
        if int(float(r["tensor_parallel"])) != tp:
            continue
        n = _num(r, "batch_size", str(path), line)
        p = _num(r, "prompt_size", str(path), line)
        out = _num(r, "token_size", str(path), line)
        pre.append((n, p, _num(r, "prompt_time", str(path), line) / 1000.0))
        dec.append((n, p + out / 2.0, _num(r, "token_time", str(path), line) / 1000.0))
    return SweepTableModel(pre, dec, sha256=sha256_hex(data), source=str(path), kind="table:splitwise",
                           keys={"model_key": model_key, "hardware_key": hardware_key, "tp": tp})


def load_qmodel_csv(path: str | Path, tp: int, model_key: str | None = None, hardware_key: str | None = None,
                    field_prefix: str = "deployment") -> SweepTableModel:
    """Load a qmodel-format CSV (see the module docstring), filtered by the optional model/hardware/tp columns."""
    data = read_table_bytes(path)
    rows = _csv_rows(data, str(path))
    need = {"phase", "batch_size", "time_s"}
    if not rows or not need <= set(rows[0]):
        raise DataError(str(path), "a qmodel table needs columns phase,batch_size,prompt_tokens,context_tokens,time_s")
    cols = set(rows[0])
    pre, dec = [], []
    tps_seen: set[int] = set()
    for i, r in enumerate(rows):
        line = i + 2
        if model_key is not None and "model" in cols and r["model"] != model_key:
            continue
        if hardware_key is not None and "hardware" in cols and r["hardware"] != hardware_key:
            continue
        if "tp" in cols and r.get("tp"):
            rtp = int(_num(r, "tp", str(path), line))
            tps_seen.add(rtp)
            if rtp != tp:
                continue
        phase = (r.get("phase") or "").strip().lower()
        n = _num(r, "batch_size", str(path), line)
        t = _num(r, "time_s", str(path), line)
        if n < 1 or t <= 0:
            raise DataError(str(path), f"row {line}: batch_size must be >= 1 and time_s > 0")
        if phase == "prefill":
            pre.append((n, _num(r, "prompt_tokens", str(path), line), t))
        elif phase == "decode":
            dec.append((n, _num(r, "context_tokens", str(path), line), t))
        else:
            raise DataError(str(path), f"row {line}: phase is {phase!r}, expected 'prefill' or 'decode'")
    if tps_seen and tp not in tps_seen:
        raise InputError(f"{field_prefix}.tp", tp, f"the table has tp {', '.join(map(str, sorted(tps_seen)))}")
    if not pre or not dec:
        raise DataError(str(path), "no prefill or no decode rows match the selected model/hardware/tp")
    keys: dict[str, object] = {"model_key": model_key, "hardware_key": hardware_key, "tp": tp}
    header = parse_header(data.decode("utf-8-sig", errors="replace"))
    if header:
        keys["provenance"] = header
    layout = header.get("layout", "sweep")
    if layout == "grid":
        return GridTableModel(pre, dec, sha256=sha256_hex(data), source=str(path), kind="table:qmodel-grid", keys=keys)
    if layout != "sweep":
        raise DataError(str(path), f"header 'layout: {layout}' is not one of {', '.join(LAYOUTS)}")
    return SweepTableModel(pre, dec, sha256=sha256_hex(data), source=str(path), kind="table:qmodel", keys=keys)


def load_distserve(path: str | Path, model_key: str, tp: int, field_prefix: str = "deployment") -> DistServeModel:
    """Load one (model, tp) entry of a DistServe profiler JSON."""
    data = read_table_bytes(path)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(str(path), f"not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise DataError(str(path), "not a DistServe profiler JSON (top level must map model -> tp -> coefficients)")
    if model_key not in doc:
        raise InputError("perf.model_key", model_key, f"models in {Path(path).name}: {', '.join(sorted(doc))}")
    entries = doc[model_key]
    if str(tp) not in entries:
        raise InputError(f"{field_prefix}.tp", tp, f"the table profiles {model_key} at tp "
                                                   f"{', '.join(sorted(entries, key=int))}")
    e = entries[str(tp)]
    try:
        coef = [tuple(float(x) for x in e[k]) for k in ("prefill", "decoding_smallbs", "decoding_largebs")]
        thr = int(e["decoding_large_small_bs_threshold"])
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(str(path), f"{model_key} tp {tp}: missing or malformed coefficient ({err})") from None
    if any(len(c) != 3 for c in coef):
        raise DataError(str(path), f"{model_key} tp {tp}: every coefficient list must have 3 numbers")
    return DistServeModel(coef[0], coef[1], coef[2], thr, sha256=sha256_hex(data), source=str(path),
                          keys={"model_key": model_key, "tp": tp})


def detect_format(path: str | Path) -> str:
    """'distserve', 'splitwise' or 'qmodel' from the file's content."""
    p = Path(path)
    head = read_table_bytes(p)[:4096].decode("utf-8", errors="replace")
    if head.lstrip().startswith("{"):
        return "distserve"
    first = next((ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    cols = {c.strip() for c in first.split(",")}
    if {"prompt_time", "token_time", "tensor_parallel"} <= cols:
        return "splitwise"
    if {"phase", "batch_size", "time_s"} <= cols:
        return "qmodel"
    raise DataError(str(p), "unknown table format; expected a splitwise-sim CSV, a DistServe JSON or a qmodel CSV")
