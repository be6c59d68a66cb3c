"""How far the analytic answer is expected to be from the replay: the validity band of an answer.

**The band.** For each latency metric m (TTFT and TPOT p50/p90/p99) the answer carries a signed
90% band [lo, hi] of the relative error e = (analytic - replay) / replay: on scenarios like this
one, 90% of the analytic answers fell within that band of the replay (positive: the model is
conservative). The bands are read off a table fitted on the generated validation corpus
(``catalog/validity_bands.toml``, made by ``python -m qmodel.validation.band_fit``; its header
names the corpus, the commit it was measured at and the command; docs/validation.md, "Validity
band"). A table cell is a group of corpus scenarios with the same values of the cell features
(``levels`` in the table, coarsest first, chosen from :data:`LEVEL_FEATURES`); its band is the
k-th smallest and k-th largest of the group's errors, k chosen so that the band covers at least
90% of new scenarios drawn like the group's with probability >= 0.9 (the fit's docstring,
:mod:`qmodel.validation.band_fit`). Groups too small for that (``min_cases``, 38) are not in the
table: the answer reads the deepest cell its features reach.

**The envelope.** The table also records what the corpus drew: the kinds (arrivals, lengths,
step times, dispatch, model family; a closed loop's think time: none, exponential or fixed) and the
ranges (load, arrival SCV, instances, batch limits, token budgets, tp / pp, prefix-cache hit ratio;
a closed loop's clients). An answer whose scenario lies outside is flagged with the feature that is
out ("outside the validated envelope: load 0.99 > 0.97"); its band is then an extrapolation. A
load below the corpus's lowest (0.2) is not flagged: queueing errors shrink towards an idle
system, and the lowest band covers it. A number the corpus never drew at all (clients, where it
drew no closed loop) is flagged as never drawn.

**Load.** u = rate / the smallest station stability limit; for a closed loop of N clients the
loop's throughput X(N) / that limit (the limiting station's utilisation; the band fit reads the
corpus's closed cases at the same load), not the rate its latencies are read at.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from typing import Any

from qmodel.result import MetricBand, Validity

__all__ = ["BAND_METRICS", "LOAD_BANDS", "LEVEL_FEATURES", "POOLED_DISPATCH", "load_band", "arrival_class", "cell_features",
           "envelope_values", "outside_envelope", "cell_of", "band_table", "validity_of", "validity_text"]

BAND_METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99")
#: load bands of u = rate / the smallest station stability limit: (name, upper bound); above the
#: last bound, the last band (and the envelope flag)
LOAD_BANDS: tuple[tuple[str, float], ...] = (("u<=0.5", 0.5), ("0.5-0.8", 0.8), ("0.8-0.9", 0.9), ("0.9-0.97", 0.97))
#: the cell features a table may use as its levels (:func:`cell_features`)
LEVEL_FEATURES = ("topology", "load", "arrivals", "kv", "lengths", "dispatch", "pool", "batch", "perf")
#: dispatch policies that pool their instances (one queue in front of them, :func:`cell_features`)
POOLED_DISPATCH = ("least_loaded", "jsq")


def load_band(u: float) -> str:
    """The load band of u (the last one above its bound)."""
    return next((name for name, hi in LOAD_BANDS if u <= hi), LOAD_BANDS[-1][0])


def arrival_class(kind: str, ca2: float) -> str:
    """'trace' for recorded arrivals (their rate drifts: no renewal SCV describes them); 'closed'
    for a closed loop (a bounded population, not a renewal stream: its SCV is a placeholder); else
    'smooth' for an SCV up to 1 (Poisson included), 'bursty' above."""
    if kind in ("trace", "closed"):
        return kind
    return "smooth" if ca2 <= 1.0 + 1e-9 else "bursty"


def cell_features(resolved: Any, topology: str, u: float) -> dict[str, str]:
    """The values of :data:`LEVEL_FEATURES` for an answer at load u: topology; load band; the
    arrivals' class (:func:`arrival_class`); kv 'binding' when the decode (or single) pool's KV holds
    fewer mean requests (prompt + output) than its max_batch, else 'ample'; the length law's kind;
    the first pool's dispatch (prefill where disaggregated) and whether it pools its instances
    ('pooled': :data:`POOLED_DISPATCH`, else 'split'); max_batch '1-8', '16-64' or '128+'; the step
    times' kind (perf)."""
    pools = list(resolved.pools.values())  # the topology's pool roles, prefill first
    first, dec = pools[0], pools[-1]
    slots = dec.kv_capacity_tokens / (resolved.mean_prompt_tokens + resolved.mean_output_tokens)
    mb = dec.config.max_batch
    return {"topology": topology, "load": load_band(u), "arrivals": arrival_class(resolved.scenario.workload.arrivals.kind, float(resolved.ca2)),
            "kv": "binding" if slots < mb else "ample", "lengths": resolved.scenario.workload.lengths.kind,
            "dispatch": first.config.dispatch, "pool": "pooled" if first.config.dispatch in POOLED_DISPATCH else "split",
            "batch": "1-8" if mb <= 8 else "16-64" if mb <= 64 else "128+", "perf": resolved.scenario.perf.kind}


def envelope_values(resolved: Any) -> tuple[dict[str, list[str]], dict[str, float]]:
    """(kinds, numbers) of a resolved scenario (:class:`qmodel.build.Resolved`) that the envelope
    checks: the corpus's drawn kinds / ranges are these over its scenarios (the load is added by
    the caller: it is a property of the rate, not the scenario)."""
    sc, spec = resolved.scenario, resolved.model
    dep = sc.deployment
    pools = [dep.prefill, dep.decode] if dep.topology == "disaggregated" else [dep.pool]
    budget = {"colocated": "max_batch_tokens", "chunked": "chunk_tokens"}.get(dep.topology)
    family = "mla" if spec.attention == "mla" else "moe" if spec.moe is not None else spec.attention
    kinds = {"arrivals": [sc.workload.arrivals.kind], "lengths": [sc.workload.lengths.kind], "perf": [sc.perf.kind],
             "dispatch": sorted({p.dispatch for p in pools}), "model family": [family]}
    numbers = {"arrival SCV": float(resolved.ca2), "instances": float(max(p.instances for p in pools)),
               "tp": float(max(p.tp for p in pools)), "pp": float(max(p.pp for p in pools)),
               "max batch": float(pools[-1].max_batch),
               "token budget": float(getattr(dep, budget) if budget else dep.prefill.max_batch_tokens),
               "prefix hit ratio": resolved.prefix_hit_fraction}
    arr = sc.workload.arrivals
    if arr.kind == "closed":
        kinds["think time"] = ["none" if arr.think_time_s == 0 else arr.think_time_dist]
        numbers["clients"] = float(arr.concurrency)
    return kinds, numbers


def outside_envelope(kinds: dict[str, list[str]], numbers: dict[str, float], envelope: dict[str, Any]) -> list[str]:
    """Why the scenario lies outside ``envelope`` (the table's), one phrase per feature; empty inside.
    The load is checked against its upper end only (module docstring)."""
    out = [f"{k} {v} never drawn" for k, vs in kinds.items() for v in vs if v not in envelope["kinds"].get(k, ())]
    for k, v in numbers.items():
        if k not in envelope["ranges"]:
            out.append(f"{k} {v:.3g} never drawn")
            continue
        lo, hi = envelope["ranges"][k]
        if v > hi * (1 + 1e-9) + 1e-12:
            out.append(f"{k} {v:.3g} > {hi:.3g}")
        elif k != "load" and v < lo * (1 - 1e-9) - 1e-12:
            out.append(f"{k} {v:.3g} < {lo:.3g}")
    return out


def cell_of(table: dict[str, Any], features: dict[str, str]) -> str | None:
    """The deepest cell of ``table`` that ``features`` reach along its levels (None: not even the
    topology's)."""
    path = [features[k] for k in table["levels"]]
    found = None
    for depth in range(1, len(path) + 1):
        key = "/".join(path[:depth])
        if key in table["cells"]:
            found = key
    return found


@cache
def band_table() -> dict[str, Any]:
    """The shipped band table (``catalog/validity_bands.toml``), read once (as a package resource:
    the installed package may be a zip)."""
    from importlib import resources

    return tomllib.loads(resources.files("qmodel.catalog").joinpath("validity_bands.toml").read_text(encoding="utf-8"))


def _pct(x: float) -> str:
    """A band end in percent: whole points, one decimal where rounding would reach -100% (the
    analytic value zero) without being it."""
    text = f"{x * 100:+.0f}%"
    if text == "-100%" and x > -1.0:
        text = f"{x * 100:+.1f}%"
    return text.replace("+0%", "0%").replace("-0%", "0%")


def validity_text(v: Validity) -> str:
    """The human line, e.g. 'TTFT p50 -3..+12%, p90 ...; TPOT ... (90% band of (analytic - replay) /
    replay; corpus cell disaggregated/0.8-0.9, 40 of 297 cases, at 3b2bc73)'."""
    if not v.bands:
        return f"unmeasured: the corpus holds no {v.cell} scenario; check this scenario with --check"
    parts = []
    for name in ("ttft", "tpot"):
        bs = [b for b in v.bands if b.metric == name]
        parts.append(f"{name.upper()} " + ", ".join(f"p{b.percentile} {_pct(b.low)}..{_pct(b.high)}" for b in bs))
    text = (f"{'; '.join(parts)} ({v.level * 100:.0f}% band of (analytic - replay) / replay; corpus cell {v.cell}, "
            f"{v.cell_cases} of {v.corpus_cases} cases, at {v.measured_at})")
    if v.outside:
        text += "; outside the validated envelope: " + ", ".join(v.outside)
    return text + "; check this scenario with --check"


def validity_of(resolved: Any, topology: str, u: float, table: dict[str, Any] | None = None) -> Validity:
    """The validity band of an answer at load u = rate / the smallest stability limit (module docstring)."""
    t = band_table() if table is None else table
    feats = cell_features(resolved, topology, u)
    found = cell_of(t, feats)
    cell, entry = (feats["topology"], None) if found is None else (found, t["cells"][found])
    kinds, numbers = envelope_values(resolved)
    numbers["load"] = float(u) if math.isfinite(u) else 0.0
    outside = outside_envelope(kinds, numbers, t["envelope"])
    bands = [] if entry is None else [MetricBand(metric=m[:4], percentile=int(m[6:]), low=entry[m][0], high=entry[m][1])
                                      for m in BAND_METRICS]
    v = Validity(level=t["level"], bands=bands, cell=cell, cell_cases=0 if entry is None else entry["cases"],
                 corpus_cases=t["corpus_cases"], measured_at=t["measured_at"], inside_envelope=not outside,
                 outside=outside, text="")
    return v.model_copy(update={"text": validity_text(v)})
