"""Vidur's operator profiles -> qmodel grid table (per-step times composed the way Vidur composes them).

Vidur (Agrawal et al., MLSys'24; microsoft/vidur, MIT) profiles each operator of one transformer
layer on one GPU with the weights sharded ``tp`` ways (``compute/<sku>/<org>/<model>/mlp.csv``,
median ms per call against ``num_tokens`` in the batch, 1..4096) and the collectives separately
(``network/<node>/all_reduce.csv``, median ms against message bytes). Its simulator adds them up
per step (``ExecutionTime``)::

    attention layer = attn_pre_proj + attn_rope + attn_post_proj + input_layernorm + all_reduce
    mlp layer       = mlp_up_proj + mlp_act + mlp_down_proj + post_attention_layernorm + all_reduce
    block           = attention layer + mlp layer + add
    step            = layers * block                     (pp = 1: no pipeline send)

(an operator the profile has no column for, e.g. phi-2's second layernorm, is not run), with
every operator evaluated at the step's token count ``T`` (prefill: the batch's prompt
tokens; decode: one token per sequence) and the all-reduce of ``T * hidden * 2`` bytes (fp16)
among ``tp`` GPUs of one node (zero at tp 1). qmodel interpolates each operator linearly in
``T`` between profiled counts (Vidur rounds ``T`` up to a multiple of 8 and uses a fitted
regressor) and the all-reduce linearly in bytes.

What the table omits, because the public profiles do not hold it: **attention kernels** (Vidur's
``attention.csv`` -- prefill attention, decode attention, KV-cache save -- is missing from the
published data), so prefill is a function of total tokens only and decode does not grow with
context; the embedding lookup and LM head (Vidur leaves them out too); CPU overheads (schedule,
sampler, input preparation: separate Vidur profiles, not published). Above 4096 tokens each
operator continues the slope of its last profiled segment (a GEMM's time is linear in M once
the GPU is full); the header says so.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from qmodel.errors import DataError, InputError
from qmodel.perf.importers import ImportedTable, sha256_file
from qmodel.perf.tables import interp_piecewise
from qmodel.settings import resolve_data_path

__all__ = ["import_vidur", "VidurOps", "VIDUR_LAYER_OPS"]

#: operators of one layer, in the order Vidur's ExecutionTime adds them (all_reduce twice, separately)
VIDUR_LAYER_OPS = ("attn_pre_proj", "attn_rope", "attn_post_proj", "input_layernorm",
                   "mlp_up_proj", "mlp_act", "mlp_down_proj", "post_attention_layernorm", "add")
_REQUIRED_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_PROMPTS = tuple(round(16 * 2 ** (k / 4)) for k in range(33))  # 16..4096, four per doubling
_PREFILL_BATCHES = (1, 2, 4, 8)
_DECODE_BATCHES = tuple(sorted({*range(1, 9), *(round(8 * 2 ** (k / 4)) for k in range(21))}))  # 1..256
_CONTEXTS = (128, 4096)
_PROFILED_TOKENS_MAX = 4096


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        raise DataError(str(path), "no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(str(path), f"cannot read as CSV ({err})") from None


def _f(row: dict[str, str], col: str, path: Path) -> float:
    try:
        v = float(row[col])
    except (KeyError, TypeError, ValueError):
        raise DataError(str(path), f"column {col!r} missing or not a number") from None
    if not math.isfinite(v) or v < 0:
        raise DataError(str(path), f"column {col!r} is {v!r}, expected a finite non-negative number")
    return v


class VidurOps:
    """Per-layer operator medians (ms) of one model/sku/tp and the all-reduce curve of one node type."""

    def __init__(self, root: Path, model_key: str, sku: str, tp: int, network: str | None) -> None:
        self.mlp_path = root / "compute" / sku / model_key / "mlp.csv"
        if not self.mlp_path.is_file():
            skus = sorted(p.name for p in (root / "compute").glob("*") if p.is_dir())
            models = sorted(str(p.parent.relative_to(root / "compute" / sku)) for p in
                            (root / "compute" / sku).glob("*/*/mlp.csv")) if sku in skus else []
            raise InputError("--model-key" if sku in skus else "--hardware-key", model_key if sku in skus else sku,
                             f"Vidur profiles for {sku}: {', '.join(models)}" if sku in skus else
                             f"Vidur profiles skus {', '.join(skus)}")
        rows = _read_csv(self.mlp_path)
        tps = sorted({int(_f(r, "num_tensor_parallel_workers", self.mlp_path)) for r in rows})
        if tp not in tps:
            raise InputError("--tp", tp, f"{model_key} on {sku} is profiled at tp {', '.join(map(str, tps))}")
        groups: dict[float, list[dict[str, str]]] = defaultdict(list)
        for r in rows:
            if int(_f(r, "num_tensor_parallel_workers", self.mlp_path)) == tp:
                groups[_f(r, "num_tokens", self.mlp_path)].append(r)
        self.tokens = np.array(sorted(groups))
        # An operator the model does not run has no column (phi-2's parallel block: no
        # post_attention_layernorm); the four GEMMs every layer runs must be there.
        present = [op for op in VIDUR_LAYER_OPS if f"time_stats.{op}.median" in rows[0]]
        missing = [op for op in _REQUIRED_OPS if op not in present]
        if missing:
            raise DataError(str(self.mlp_path), f"no operator columns for {', '.join(missing)}")
        #: the operators summed per layer (those the profile holds)
        self.ops = tuple(present)
        self.op_ms = {op: np.array([float(np.median([_f(r, f"time_stats.{op}.median", self.mlp_path) for r in groups[t]]))
                                    for t in self.tokens]) for op in self.ops}
        self.hidden = int(_f(rows[0], "n_embd", self.mlp_path))
        self.tp = tp
        self.network = network or f"{sku}_dgx"
        self.ar_path: Path | None = None
        if tp > 1:
            self.ar_path = root / "network" / self.network / "all_reduce.csv"
            if not self.ar_path.is_file():
                nets = sorted(p.parent.name for p in (root / "network").glob("*/all_reduce.csv"))
                raise InputError("--network", self.network, f"Vidur all-reduce profiles: {', '.join(nets)}")
            ar: dict[float, list[float]] = defaultdict(list)
            for r in _read_csv(self.ar_path):
                if int(_f(r, "num_workers", self.ar_path)) == tp and int(_f(r, "devices_per_node", self.ar_path)) == tp:
                    ar[_f(r, "size", self.ar_path)].append(_f(r, "time_stats.all_reduce.median", self.ar_path))
            if len(ar) < 2:
                raise InputError("--tp", tp, f"{self.network} has no single-node all-reduce profile for {tp} GPUs")
            self.ar_bytes = np.array(sorted(ar))
            self.ar_ms = np.array([float(np.median(ar[b])) for b in self.ar_bytes])

    def layer_ms(self, tokens: np.ndarray) -> np.ndarray:
        """One layer's time (ms) at each token count: operators + two all-reduces."""
        t = np.asarray(tokens, dtype=float)
        total = sum(interp_piecewise(t, self.tokens, self.op_ms[op], loglog=False)[0] for op in self.ops)
        if self.tp > 1:
            ar, _ = interp_piecewise(t * self.hidden * 2.0, self.ar_bytes, self.ar_ms, loglog=False)
            total = total + 2.0 * ar
        return np.asarray(total)


def import_vidur(path: str, model_key: str, sku: str, tp: int, layers: int, *, network: str | None = None
                 ) -> ImportedTable:
    """Compose Vidur's operator medians into prefill and decode step times on a grid."""
    if layers < 1:
        raise InputError("--layers", layers, "a positive number of transformer layers")
    root = resolve_data_path(path)
    if not (root / "compute").is_dir():
        raise DataError(str(root), "not a Vidur profiling folder (needs compute/<sku>/<org>/<model>/mlp.csv)")
    ops = VidurOps(root, model_key, sku, tp, network)
    pn = np.array([n for n in _PREFILL_BATCHES for _ in _PROMPTS], dtype=float)
    pp = np.array([p for _ in _PREFILL_BATCHES for p in _PROMPTS], dtype=float)
    pre_s = layers * ops.layer_ms(pn * pp) / 1000.0
    dn = np.array([n for n in _DECODE_BATCHES for _ in _CONTEXTS], dtype=float)
    dc = np.array([c for _ in _DECODE_BATCHES for c in _CONTEXTS], dtype=float)
    dec_s = layers * ops.layer_ms(dn) / 1000.0
    files = [f"{ops.mlp_path.relative_to(root).as_posix()} sha256={sha256_file(ops.mlp_path)}"]
    if ops.ar_path is not None:
        files.append(f"{ops.ar_path.relative_to(root).as_posix()} sha256={sha256_file(ops.ar_path)}")
    return ImportedTable(
        source="vidur", layout="grid", tp=tp,
        prefill=[(float(n), float(p), float(t)) for n, p, t in zip(pn, pp, pre_s)],
        decode=[(float(n), float(c), float(t)) for n, c, t in zip(dn, dc, dec_s)],
        header={"source_file": files, "model": model_key, "hardware": sku, "layers": str(layers),
                "method": "Vidur ExecutionTime: layers x (" + " + ".join(ops.ops) + " + 2 all_reduce of "
                          f"tokens x {ops.hidden} x 2 B on {ops.network if tp > 1 else 'none (tp 1)'}), operator medians",
                "note": ["omits attention kernels (Vidur's attention.csv is not in the public data): prefill depends on "
                         "total tokens only, decode does not grow with context",
                         "omits embedding, LM head and CPU overheads (schedule, sampler, input preparation)",
                         f"steps of more than {_PROFILED_TOKENS_MAX} tokens continue each operator's last profiled slope"]})
