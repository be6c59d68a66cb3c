"""Fit the catalog's workload presets to the public traces in the data folder.

Each preset is a correlated lognormal length mix::

    log P ~ N(log m_p, s_p^2),  log O ~ N(log m_o, s_o^2),  corr(log P, log O) = r,
    clipped to the trace's [min, max]

fitted by maximum likelihood on the logs (median m = exp(mean log x), sigma s = std of log x with
ddof 0, r = Pearson correlation of the logs), plus the trace's mean arrival rate, the coefficient of
variation of inter-arrival gaps, and (Mooncake) the prefix-block hit ratio with an unbounded cache.

``python -m qmodel.presets_fit`` prints the fitted values as ``[[workload]]`` TOML;
``catalog/workloads.toml`` holds them (rounded to 3 significant digits) and a test refits from the
data and checks every number to 2 significant digits.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from qmodel.errors import DataError

__all__ = ["TRACE_PRESETS", "TraceLengths", "FittedPreset", "load_trace_lengths", "fit_trace", "fit_all", "round_sig"]

#: preset name -> (file under the data folder, format)
TRACE_PRESETS: dict[str, tuple[str, str]] = {
    "azure-conv-2023": ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure"),
    "azure-code-2023": ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure"),
    "mooncake-conv": ("mooncake/conversation_trace.jsonl", "mooncake"),
    "sharegpt": ("length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", "lengths"),
}


@dataclass(frozen=True)
class TraceLengths:
    prompt: np.ndarray
    output: np.ndarray
    arrival_s: np.ndarray | None  # None for length-only files
    prefix_hit_ratio: float | None  # Mooncake block hashes only


@dataclass(frozen=True)
class FittedPreset:
    prompt_median_tokens: float
    prompt_sigma: float
    prompt_min_tokens: float
    prompt_max_tokens: float
    output_median_tokens: float
    output_sigma: float
    output_min_tokens: float
    output_max_tokens: float
    correlation: float
    rate_per_s: float | None
    arrival_cv: float | None
    prefix_hit_ratio: float | None
    n: int


def _azure_seconds(stamp: str) -> float:
    # 'YYYY-MM-DD HH:MM:SS.fffffff' (7 fractional digits: datetime.fromisoformat rejects them on 3.11).
    day, clock = stamp.strip().split(" ")
    hh, mm, ss = clock.split(":")
    return date.fromisoformat(day).toordinal() * 86400.0 + int(hh) * 3600.0 + int(mm) * 60.0 + float(ss)


def load_trace_lengths(path: Path, fmt: str) -> TraceLengths:
    """Read prompt/output lengths (and arrivals where present) from one of the public trace formats."""
    try:
        if fmt == "azure":
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
            t = np.array([_azure_seconds(r["TIMESTAMP"]) for r in rows])
            return TraceLengths(np.array([int(r["ContextTokens"]) for r in rows]),
                                np.array([int(r["GeneratedTokens"]) for r in rows]), t - t.min(), None)
        if fmt == "lengths":
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
            return TraceLengths(np.array([int(r["num_prefill_tokens"]) for r in rows]),
                                np.array([int(r["num_decode_tokens"]) for r in rows]), None, None)
        if fmt == "mooncake":
            recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            seen: set[int] = set()
            hits = blocks = 0
            for r in recs:
                ids = r.get("hash_ids") or []
                hits += sum(1 for h in ids if h in seen)
                blocks += len(ids)
                seen.update(ids)
            return TraceLengths(np.array([int(r["input_length"]) for r in recs]),
                                np.array([int(r["output_length"]) for r in recs]),
                                np.array([float(r["timestamp"]) / 1000.0 for r in recs]),
                                hits / blocks if blocks else None)
    except FileNotFoundError:
        raise DataError(str(path), "file not found") from None
    except (KeyError, ValueError, json.JSONDecodeError) as err:
        raise DataError(str(path), f"unexpected content for format {fmt!r}: {err}") from None
    raise DataError(str(path), f"unknown format {fmt!r}; known: azure, lengths, mooncake")


def fit_trace(tr: TraceLengths) -> FittedPreset:
    """Lognormal MLE on the logs, plus rate and inter-arrival CV when arrivals are present."""
    p = tr.prompt.astype(float)
    o = tr.output.astype(float)
    if len(p) < 2 or (p <= 0).any() or (o <= 0).any():
        raise DataError("trace", "need at least two requests with positive prompt and output lengths")
    lp, lo = np.log(p), np.log(o)
    rate = cv = None
    if tr.arrival_s is not None and len(tr.arrival_s) > 1:
        t = np.sort(tr.arrival_s)
        span = float(t[-1] - t[0])
        gaps = np.diff(t)
        rate = (len(t) - 1) / span if span > 0 else None
        cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else None
    return FittedPreset(
        prompt_median_tokens=float(math.exp(lp.mean())), prompt_sigma=float(lp.std()),
        prompt_min_tokens=float(p.min()), prompt_max_tokens=float(p.max()),
        output_median_tokens=float(math.exp(lo.mean())), output_sigma=float(lo.std()),
        output_min_tokens=float(o.min()), output_max_tokens=float(o.max()),
        correlation=float(np.corrcoef(lp, lo)[0, 1]), rate_per_s=rate, arrival_cv=cv,
        prefix_hit_ratio=tr.prefix_hit_ratio, n=len(p))


def round_sig(x: float, digits: int = 3) -> float:
    """Round to ``digits`` significant digits (0 stays 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def fit_all(data_dir: Path) -> dict[str, FittedPreset]:
    return {name: fit_trace(load_trace_lengths(data_dir / rel, fmt)) for name, (rel, fmt) in TRACE_PRESETS.items()}


def main() -> None:  # pragma: no cover - a maintenance script
    from qmodel.settings import require_data_dir

    for name, f in fit_all(require_data_dir()).items():
        print(f"# {name}: n={f.n} rate={f.rate_per_s} cv={f.arrival_cv} prefix_hit={f.prefix_hit_ratio}")
        print("[workload.lengths]")
        for k in ("prompt_median_tokens", "prompt_sigma", "prompt_min_tokens", "prompt_max_tokens",
                  "output_median_tokens", "output_sigma", "output_min_tokens", "output_max_tokens", "correlation"):
            v = getattr(f, k)
            print(f"{k} = {int(v) if k.endswith(('max_tokens', 'min_tokens')) else round_sig(v)}")
        print()


if __name__ == "__main__":  # pragma: no cover
    main()
