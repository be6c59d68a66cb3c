"""The generated validation corpus: seeded, stratified scenarios over the space users bring (issue 18 §1).

:func:`generate` draws ``n`` :class:`CorpusCase` s, each a valid :class:`~qmodel.scenario.Scenario`
(at rate 1 req/s: the runner sets the rate) plus its load ``utilization`` (rate / the analytic
stability limit, the suite's definition in docs/validation.md) and the feature values it was drawn
with. Valid by construction: the GPU count per instance is the smallest tp (then pp) whose weights
leave KV room for 64k tokens (:func:`qmodel.perf.memory.memory_budget`), a binding KV capacity is
never below 1.2 x the longest request, and every number lies inside its schema domain.

**Stratification.** Every feature axis (:data:`AXES`) has a *deck*: its values repeated and shuffled
by the seeded generator; a draw where the axis applies takes the next card, and an exhausted deck is
reshuffled. Within the draws where an axis applies, each value therefore appears
floor(k/K) or ceil(k/K) times (k applicable draws, K values), independently of the other axes. Axes
that apply to every draw (topology, perf, arrivals, lengths, budget, max batch, KV, load band,
dispatch, instances) have at most 6 values, so in 300 draws each appears >= 50 times; the
disaggregated-only axes (link class, sharing, transfer mode, first token) and the roofline-only
model family get >= 25; the closed-loop-only think time (75 closed draws in 300 without the data
folder, 60 with it) gets >= 20, its ``0`` card falling back to ``exp`` where no Z = 0 loop reaches
the band (tested in ``tests/test_corpus.py``). A table step-time model fixes its model and GPU, so
its draws take the model family of the table's model.

**Closed loops.** An ``arrivals: closed`` draw is built as a Poisson scenario and then placed as a
loop of N clients on its load band by :func:`qmodel.validation.corpus_closed.place_loop`, from the
stability limit and the unloaded latency T0 alone (no queueing solve: a modelling change does not
re-draw it); its ``utilization`` is the loop's fluid load N / (lambda_max (T0 + Z)).

**Data.** Strata that read the public data folder (trace arrivals, empirical lengths,
splitwise-sim tables) are used only when it is present (``data=None``: detect); otherwise they are
left out and :attr:`Corpus.skipped` says which and why. The bundled DistServe tables (OPT-13B/66B on
A100) need no data folder.

**Determinism.** The same (n, seed, data) gives byte-identical scenarios (canonical JSON; the
bundled table's path is absolute, so identical within one installation).

**SLO.** Targets are multiples of the scenario's own idle latencies from its step-time model:
TTFT = m1 x the prefill time of the mean prompt (m1 log-uniform in [3, 20]), TPOT = m2 x the decode
step of a 16-sequence batch at mean context (m2 in [1.2, 3]), so attainment lies on the informative
part of the latency CDF rather than at 0 or 1 for most scenarios.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from qmodel.errors import InputError
from qmodel.scenario import Scenario, parse_scenario
from qmodel.topology import topology_named
from qmodel.validation.corpus_closed import THINK_VALUES, place_loop

__all__ = ["AXES", "LOAD_BANDS", "FAMILIES", "FAMILY_OF", "GPUS", "CorpusCase", "Corpus", "generate", "load_band", "case_json",
           "fit_layout", "draw_lengths", "draw_arrivals", "draw_slo", "Decks", "DATA_VALUES"]

#: load bands of the corpus: (name, lower, upper) of u = rate / analytic limit; u is uniform inside
LOAD_BANDS: tuple[tuple[str, float, float], ...] = (
    ("0.2-0.5", 0.2, 0.5), ("0.5-0.8", 0.5, 0.8), ("0.8-0.9", 0.8, 0.9), ("0.9-0.95", 0.9, 0.95),
    ("0.95-0.97", 0.95, 0.97))

FAMILIES: dict[str, tuple[str, ...]] = {
    "dense-mha": ("llama-2-7b", "llama-2-13b", "opt-13b", "opt-66b", "bloom-176b"),
    "gqa": ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "llama-3.1-70b", "qwen3-8b"),
    "mla": ("deepseek-v3", "kimi-k2"),
    "moe": ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "qwen3-235b-a22b"),
}
#: the table models' families (not drawn for roofline: their tables fix the GPU)
FAMILY_OF = {m: f for f, ms in FAMILIES.items() for m in ms} | {"llama-2-70b": "gqa"}
GPUS = ("h100-sxm", "h200-sxm", "a100-80gb-sxm", "b200", "mi300x", "l40s")
_LINKS: dict[str, tuple[str, ...]] = {
    "ethernet-slow": ("eth-10g-tcp", "eth-25g-tcp"),
    "datacenter": ("eth-100g-tcp", "ib-hdr-200", "ib-ndr-400", "roce-4x200", "roce-8x400"),
    "wan-5ms": ("wan-100g",),
    "intra-node": ("pcie-gen4-x16", "pcie-gen5-x16", "nvlink-3", "nvlink-4", "nvlink-5"),
}
_BATCHES = {"1-8": (1, 2, 4, 8), "16-64": (16, 32, 64), "128-512": (128, 256, 512)}
_PRESETS = ("azure-conv-2023", "azure-code-2023", "mooncake-conv", "sharegpt")
_EMPIRICAL = (("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure"),
              ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure"),
              ("length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", "sharegpt"),
              ("mooncake/conversation_trace.jsonl", "mooncake"))
_TRACES = (("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", None),
           ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", None),
           ("mooncake/conversation_trace.jsonl", "mooncake", 0))
#: table options: name -> (model, GPUs the table measures, tp choices, perf block builder key)
_TABLES: dict[str, tuple[str, tuple[str, ...], tuple[int, ...], str]] = {
    "distserve-opt-13b": ("opt-13b", ("a100-80gb-sxm",), (1, 2, 4), "distserve"),
    "distserve-opt-66b": ("opt-66b", ("a100-80gb-sxm",), (2, 4, 8), "distserve"),
    "splitwise-llama-2-70b": ("llama-2-70b", ("a100-80gb-sxm", "h100-sxm"), (4, 8), "splitwise"),
    "splitwise-bloom-176b": ("bloom-176b", ("a100-80gb-sxm", "h100-sxm"), (8,), "splitwise"),
}
_DATA_TABLES = {"splitwise": "splitwise_sim/perf_model.csv"}
_MIN_KV_TOKENS = 65536

#: feature axis -> its values (data-only values are dropped without the data folder)
AXES: dict[str, tuple[str, ...]] = {
    "topology": ("colocated", "chunked", "disaggregated"),
    "perf": ("roofline", "roofline", "table"),  # two roofline cards per table card
    "model_family": tuple(FAMILIES),
    "arrivals": ("poisson", "gamma-cv0.5-1", "gamma-cv1-4", "trace", "closed"),
    "lengths": ("fixed", "lognormal", "preset", "empirical"),
    "budget": ("512", "1024", "2048", "4096", "8192", "16384"),
    "max_batch": tuple(_BATCHES),
    "kv": ("binding", "ample"),
    "band": tuple(b for b, _, _ in LOAD_BANDS),
    "dispatch": ("random", "round_robin", "least_loaded", "jsq"),
    "instances": ("1", "2", "4"),
    "link_class": tuple(_LINKS),
    "link_sharing": ("dedicated", "fcfs", "fair"),
    "transfer_mode": ("serialized", "layerwise"),
    "first_token_from": ("prefill", "decode"),
    "pd_gpus": ("same", "hetero"),
    "think_time": THINK_VALUES,
}
#: axis values that need the data folder (left out of a data-free draw)
DATA_VALUES = {"arrivals": {"trace"}, "lengths": {"empirical"}}


class CorpusCase(BaseModel):
    """One corpus scenario: the scenario at rate 1 req/s, its load and its feature values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    scenario: Scenario
    utilization: float
    features: dict[str, str]


class Corpus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    data: bool
    cases: tuple[CorpusCase, ...]
    skipped: tuple[str, ...]


def load_band(u: float) -> str:
    """The corpus load band of u (above the last band's upper bound: the last band)."""
    for name, lo, hi in LOAD_BANDS:
        if u <= hi:
            return name
    return LOAD_BANDS[-1][0]


def case_json(case: CorpusCase) -> str:
    """Canonical JSON of a case (sorted keys): the byte-identity the determinism test compares."""
    return json.dumps(case.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


class Decks:
    """One shuffled, refilled deck of values per axis (see the module docstring)."""

    def __init__(self, rng: np.random.Generator, axes: dict[str, tuple[str, ...]]):
        self.rng, self.axes, self.cards = rng, axes, {k: [] for k in axes}

    def draw(self, axis: str) -> str:
        deck = self.cards[axis]
        if not deck:
            vals = list(self.axes[axis])
            deck.extend(vals[i] for i in self.rng.permutation(len(vals)))
        return deck.pop()


def _bundled_table(name: str) -> str:
    import qmodel.catalog

    return str(Path(qmodel.catalog.__file__).resolve().parent / "tables" / "distserve" / name)


def fit_layout(model: str, gpu: str) -> tuple[int, int] | None:
    """Smallest (tp, pp) on ``gpu`` whose weights leave room for _MIN_KV_TOKENS of KV, or None."""
    from qmodel.perf.memory import memory_budget
    from qmodel.registry import get_gpu, get_model

    m, g = get_model(model), get_gpu(gpu)
    for tp, pp in ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2)):
        try:
            if memory_budget(m, g, tp, pp).kv_capacity_tokens >= _MIN_KV_TOKENS:
                return tp, pp
        except InputError:
            continue
    return None


def draw_lengths(kind: str, rng: np.random.Generator, max_context: int) -> tuple[dict[str, Any], str]:
    if kind == "fixed":  # a request that fits the model's context (no truncation of a fixed length)
        o = int(rng.choice([16, 64, 128, 256, 512]))
        p = int(rng.choice([x for x in (128, 512, 1024, 2048, 4096) if x + o <= max_context]))
        return {"kind": "fixed", "prompt_tokens": p, "output_tokens": o}, f"fixed-{p}-{o}"
    if kind == "lognormal":
        return {"kind": "lognormal", "prompt_median_tokens": round(float(np.exp(rng.uniform(np.log(200), np.log(4000)))), 1),
                "prompt_sigma": round(float(rng.uniform(0.4, 1.2)), 3), "prompt_max_tokens": 16384,
                "output_median_tokens": round(float(np.exp(rng.uniform(np.log(20), np.log(400)))), 1),
                "output_sigma": round(float(rng.uniform(0.4, 1.0)), 3), "output_max_tokens": 2048}, "lognormal"
    if kind == "preset":
        name = str(rng.choice(_PRESETS))
        return {"kind": "preset", "name": name}, name
    rel, fmt = _EMPIRICAL[int(rng.integers(len(_EMPIRICAL)))]
    return {"kind": "empirical", "path": f"data:{rel}", "format": fmt}, Path(rel).stem


def draw_arrivals(kind: str, rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    """The arrivals block (rate 1) and its source label; a closed loop is drawn as Poisson here and
    placed on its load band after the scenario is built (:mod:`qmodel.validation.corpus_closed`)."""
    if kind in ("poisson", "closed"):
        return {"kind": "poisson", "rate_per_s": 1.0}, kind
    if kind.startswith("gamma"):
        lo, hi = (0.5, 1.0) if kind == "gamma-cv0.5-1" else (1.0, 4.0)
        cv = round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))), 3)
        return {"kind": "gamma", "rate_per_s": 1.0, "cv": cv}, f"gamma-cv{cv:g}"
    rel, fmt, jitter = _TRACES[int(rng.integers(len(_TRACES)))]
    a = {"kind": "trace", "path": f"data:{rel}", "format": fmt, "rate_per_s": 1.0}
    if jitter is not None:
        a["jitter_seed"] = jitter
    return a, Path(rel).stem


def _perf(table: str | None) -> dict[str, Any]:
    if table is None:
        return {"kind": "roofline"}
    model, _, _, src = _TABLES[table]
    if src == "distserve":
        return {"kind": "table", "path": _bundled_table("profiler-a100-80g.vllm.json"), "format": "distserve"}
    return {"kind": "table", "path": f"data:{_DATA_TABLES[src]}", "format": "splitwise"}


def draw_slo(sc: dict[str, Any], mean_p: float, mean_o: float, rng: np.random.Generator) -> dict[str, Any]:
    """SLO targets as multiples of the scenario's idle step times (module docstring)."""
    from qmodel.perf.service_time import service_model
    from qmodel.registry import get_gpu, get_model

    dep = sc["deployment"]
    pools = topology_named(dep["topology"]).pool_roles  # prefill first: ("pool",) for one pool
    pre, dec = dep[pools[0]], dep[pools[-1]]
    model = get_model(sc["model"])
    perf = parse_scenario(dict(sc, slo={"ttft_s": 1.0, "tpot_s": 1.0})).perf
    sp = service_model(perf, model, get_gpu(pre["gpu"]), pre["tp"], pre["pp"])
    sd = service_model(perf, model, get_gpu(dec["gpu"]), dec["tp"], dec["pp"])
    t_pre = float(sp.prefill_time_s(mean_p, mean_p * mean_p, 1))
    n = 16
    t_dec = float(sd.decode_step_time_s(n, n * (mean_p + 0.5 * mean_o)))
    m1, m2 = float(np.exp(rng.uniform(np.log(3), np.log(20)))), float(rng.uniform(1.2, 3.0))
    return {"ttft_s": float(f"{max(m1 * t_pre, 1e-3):.4g}"), "tpot_s": float(f"{max(m2 * t_dec, 1e-4):.4g}"),
            "attainment_goal": 0.9}


def _draw(i: int, decks: Decks, rng: np.random.Generator, tables: list[str]) -> CorpusCase:
    from qmodel.perf.memory import memory_budget
    from qmodel.registry import get_gpu, get_model
    from qmodel.workload import fit_context, length_mix

    f: dict[str, str] = {}
    top = f["topology"] = decks.draw("topology")
    f["perf"] = decks.draw("perf")
    table = None
    if f["perf"] == "table":
        table = tables[int(rng.integers(len(tables)))]
        model, tgpus, tps, _ = _TABLES[table]
        gpu = str(rng.choice(tgpus))
        tp, pp = int(rng.choice(tps)), 1
        f["model_family"] = FAMILY_OF[model]
        f["table"] = table
    else:
        f["model_family"] = decks.draw("model_family")
        while True:  # a (model, GPU) pair that fits in at most 16 GPUs per instance
            model = str(rng.choice(FAMILIES[f["model_family"]]))
            gpu = str(rng.choice(GPUS))
            lay = fit_layout(model, gpu)
            if lay is not None:
                tp, pp = lay
                break
    f["model"], f["gpu"] = model, gpu
    arr, f["arrival_source"] = draw_arrivals(decks.draw("arrivals"), rng)
    f["arrivals"] = "closed" if f["arrival_source"] == "closed" else "trace" if arr["kind"] == "trace" else (
        "poisson" if arr["kind"] == "poisson" else "gamma-cv0.5-1" if arr["cv"] <= 1.0 else "gamma-cv1-4")
    f["lengths"] = decks.draw("lengths")
    lengths, f["length_source"] = draw_lengths(f["lengths"], rng, get_model(model).max_context_tokens)
    f["budget"] = decks.draw("budget")
    f["max_batch"] = decks.draw("max_batch")
    max_batch = int(rng.choice(_BATCHES[f["max_batch"]]))
    f["kv"] = decks.draw("kv")
    f["band"] = decks.draw("band")
    lo, hi = next((lo, hi) for b, lo, hi in LOAD_BANDS if b == f["band"])
    u = round(float(rng.uniform(lo, hi)), 4)
    f["dispatch"] = decks.draw("dispatch")
    f["instances"] = decks.draw("instances")
    inst = int(f["instances"])
    budget = int(f["budget"])

    workload = {"arrivals": arr, "lengths": lengths}
    mix = length_mix(parse_scenario({"model": model, "workload": workload, "slo": {"ttft_s": 1.0, "tpot_s": 1.0},
                                     "deployment": {"topology": "colocated", "pool": {"gpu": gpu}}}).workload, iid=True)
    p, o, _ = fit_context(mix.prompt, mix.output, get_model(model).max_context_tokens)
    mean_p, mean_o, longest = float(np.mean(p)), float(np.mean(o)), float(np.max(p + o))

    dec_gpu, dec_tp, dec_pp = gpu, tp, pp
    shape = topology_named(top)
    if shape.separate_prefill:
        f["pd_gpus"] = decks.draw("pd_gpus")
        if f["pd_gpus"] == "hetero":
            if table is not None:
                others = [g for g in _TABLES[table][1] if g != gpu]
            else:
                others = [g for g in GPUS if g != gpu and fit_layout(model, g) is not None]
            if others:
                dec_gpu = str(rng.choice(others))
                if table is None:
                    dec_tp, dec_pp = fit_layout(model, dec_gpu)  # type: ignore[misc]
            else:
                f["pd_gpus"] = "same"
    cap1 = memory_budget(get_model(model), get_gpu(dec_gpu), dec_tp, dec_pp).kv_capacity_tokens
    frac = 0.9
    if f["kv"] == "binding":
        target = max(float(rng.uniform(3.0, 12.0)) * (mean_p + mean_o), 1.2 * longest)
        frac = min(0.9, math.ceil(target / cap1 * 1e4) / 1e4)
        if frac >= 0.9:
            f["kv"] = "ample"  # even the whole memory holds no more than the binding target
    pool = {"gpu": dec_gpu, "tp": dec_tp, "pp": dec_pp, "instances": inst, "max_batch": max_batch,
            "kv_memory_fraction": max(frac, 0.01), "dispatch": f["dispatch"]}
    if shape.budget_field is not None:  # one pool, its token budget a deployment field
        dep: dict[str, Any] = {"topology": top, "pool": pool, shape.budget_field: budget}
    else:
        f["link_class"] = decks.draw("link_class")
        f["link"] = str(rng.choice(_LINKS[f["link_class"]]))
        f["link_sharing"] = decks.draw("link_sharing")
        f["transfer_mode"] = decks.draw("transfer_mode")
        f["first_token_from"] = decks.draw("first_token_from")
        n_pre = inst
        n_dec = int(rng.choice([1, 2, 4]))
        pool["instances"] = n_dec
        dep = {"topology": top, "prefill": {"gpu": gpu, "tp": tp, "pp": pp, "instances": n_pre,
                                            "max_batch_tokens": budget, "dispatch": f["dispatch"]},
               "decode": pool, "link": f["link"], "link_sharing": f["link_sharing"],
               "transfer_mode": f["transfer_mode"], "first_token_from": f["first_token_from"]}
    sc = {"name": f"corpus-{i:04d}", "model": model, "workload": workload, "deployment": dep, "perf": _perf(table)}
    sc["slo"] = draw_slo(sc, mean_p, mean_o, rng)
    scenario = parse_scenario(sc, source=f"corpus case {i}")
    if f["arrivals"] == "closed":
        scenario, u, f["think_time"] = place_loop(scenario, u, (lo, hi), decks.draw("think_time"), rng)
        f["clients"] = str(scenario.workload.arrivals.concurrency)  # type: ignore[union-attr]
    return CorpusCase(id=f"c{i:04d}", scenario=scenario, utilization=u, features=f)


def generate(n: int, seed: int = 0, data: bool | None = None) -> Corpus:
    """``n`` stratified scenarios from ``seed``; ``data``: use the data-folder strata (None: when present)."""
    from qmodel.settings import data_dir

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError("--n", n, "a positive number of scenarios")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError("--seed", seed, "a non-negative integer")
    d = data_dir()
    use_data = (d is not None) if data is None else bool(data)
    if use_data and d is None:
        raise InputError("data", True, "a data folder (set QMODEL_DATA_DIR) for the data strata")
    skipped: list[str] = []
    axes = dict(AXES)
    tables = [t for t, v in _TABLES.items() if v[3] == "distserve"]
    if use_data:
        tables += [t for t, v in _TABLES.items() if v[3] != "distserve"]
    else:
        why = "no data folder (QMODEL_DATA_DIR)" if d is None else "data strata turned off"
        for axis, vals in DATA_VALUES.items():
            axes[axis] = tuple(v for v in axes[axis] if v not in vals)
            skipped += [f"{axis}={v}: {why}" for v in sorted(vals)]
        skipped.append(f"perf=table splitwise-sim (llama-2-70b, bloom-176b): {why}")
    rng = np.random.default_rng(seed)
    decks = Decks(rng, axes)
    cases = tuple(_draw(i, decks, rng, tables) for i in range(n))
    return Corpus(seed=seed, data=use_data, cases=cases, skipped=tuple(skipped))
