"""Ranking groups of the generated corpus: does the analytic engine pick the deployment the replay would?

Issue 18 §2 asks for "Kendall τ >= 0.9 between analytic and replay goodputs within each (model,
GPU budget) group". A :class:`RankGroup` is what a planner weighs at one decision: one model, one
GPU type, one GPU budget (4 or 8 GPUs), one workload and one SLO, and 4-6 candidate deployments
that each use the whole budget. :func:`generate_groups` draws them from a seed.

**Candidates are the planner's own plans.** The search space is :class:`qmodel.planner.space.SearchSpace`
over the group's GPU (all three topologies, TP from the smallest that fits up to the budget, chunk
budgets 512 and 2048, layer-wise transfer over the group's link), each family's instance grid at
exactly the budget, minus the pools the planner itself refuses
(:meth:`qmodel.planner.evaluate.EngineEvaluator.pool_issue`: TP rule, memory, SLO missed when idle);
each plan becomes a scenario by :func:`qmodel.planner.evaluate.scenario_for` (the planner's
re-targeting), crossed with a dispatch rule for every pool (round_robin, least_loaded, jsq; a pool of
one instance has no choice, so it is round_robin and its other dispatch duplicates are dropped). The
group keeps k of these options (k uniform in 4-6): one per topology present (chosen at random), the
rest drawn without replacement, so colocated vs chunked vs disaggregated is weighed in every group
that can host all three.

**Draws.** Per group, in order: model family (a shuffled deck, as in :mod:`qmodel.validation.corpus`),
budget (deck of 4 and 8; 8 where the family fits no half of 4 GPUs), model and GPU (uniform over the
family's pairs whose smallest TP leaving 64k KV tokens has pp = 1 and is at most half the budget, so
that one prefill and one decode instance fit; roofline step times), arrivals
(deck: Poisson, Gamma cv 0.5-1, Gamma cv 1-4; trace arrivals with the data folder), lengths (deck:
fixed, lognormal, preset; empirical with the data folder), decode max batch (16-256), prefill token
budget (2048-8192), link (InfiniBand NDR 400, RoCE 4x200 or PCIe gen5) and the SLO. The SLO is the
corpus rule (:func:`qmodel.validation.corpus.draw_slo`) on the group's reference instance (one
instance at the smallest TP): TTFT 3-20x its idle prefill of the mean prompt, TPOT 1.2-3x its
16-sequence decode step, goal 0.9; every candidate is at least as fast when idle, so the goodputs
are not all zero. The draws use their own generator (seed sequence (seed, 31)): the scenario corpus's
draws are untouched.

**Determinism.** The same (n, seed, data) gives byte-identical groups (:func:`group_json`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from qmodel.errors import InputError
from qmodel.scenario import Scenario, parse_scenario
from qmodel.validation.corpus import FAMILIES, GPUS, Decks, draw_arrivals, draw_lengths, draw_slo, fit_layout

__all__ = ["RANK_AXES", "BUDGETS", "DISPATCH", "RankCandidate", "RankGroup", "RankCorpus", "generate_groups",
           "group_json"]

#: GPU budgets of a group (one node or half of one)
BUDGETS = ("4", "8")
#: dispatch rules a candidate's pools may use
DISPATCH = ("round_robin", "least_loaded", "jsq")
_LINKS = ("ib-ndr-400", "roce-4x200", "pcie-gen5-x16")
_MAX_BATCH = (16, 32, 64, 128, 256)
_PREFILL_BUDGET = (2048, 4096, 8192)
_CHUNKS = (512, 2048)
#: stream of the group generator's seed sequence (the corpus uses the bare seed)
_STREAM = 31
#: group feature axis -> values (data-only values dropped without the data folder)
RANK_AXES: dict[str, tuple[str, ...]] = {
    "model_family": tuple(FAMILIES),
    "budget": BUDGETS,
    "arrivals": ("poisson", "gamma-cv0.5-1", "gamma-cv1-4", "trace"),
    "lengths": ("fixed", "lognormal", "preset", "empirical"),
}
_DATA_VALUES = {"arrivals": {"trace"}, "lengths": {"empirical"}}


class RankCandidate(BaseModel):
    """One candidate deployment of a group: its plan label, dispatch, topology and scenario (rate 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    topology: str
    dispatch: str
    scenario: Scenario


class RankGroup(BaseModel):
    """One planner decision: the candidates share model, GPU, budget, workload and SLO."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    features: dict[str, str]
    candidates: tuple[RankCandidate, ...]


class RankCorpus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    data: bool
    groups: tuple[RankGroup, ...]
    skipped: tuple[str, ...]


def group_json(group: RankGroup) -> str:
    """Canonical JSON of a group (sorted keys): what the determinism test compares."""
    return json.dumps(group.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _with_dispatch(sc: Scenario, dispatch: str) -> tuple[Scenario, str]:
    """``sc`` with every pool of more than one instance on ``dispatch`` (others round_robin), and
    the dispatch label ('-' when no pool has a choice)."""
    from qmodel.topology import topology_named

    raw = sc.model_dump(mode="json", exclude_none=True)
    used = False
    for role in topology_named(sc.deployment.topology).pool_roles:
        pool = raw["deployment"][role]
        many = pool["instances"] > 1
        pool["dispatch"] = dispatch if many else "round_robin"
        used = used or many
    return parse_scenario(raw, source=sc.name), dispatch if used else "-"


def _options(base: Scenario, gpu: str, tps: tuple[int, ...], budget: int, link: str) -> list[RankCandidate]:
    """Every (plan at exactly ``budget`` GPUs, dispatch) the planner would weigh (module docstring)."""
    from qmodel.planner.evaluate import EngineEvaluator, scenario_for
    from qmodel.planner.space import SearchSpace

    space = SearchSpace(gpus=(gpu,), tps=tps, links=(link,), chunk_tokens=_CHUNKS, max_instances=budget,
                        max_gpus=budget)
    ev = EngineEvaluator(base)
    out: dict[str, RankCandidate] = {}
    for fam in space.families(gpu, link):
        if any(ev.pool_issue(role, g, tp) for role, g, tp in fam.shape.family_pools(fam)):
            continue
        for nd, npf in space.instance_grid(fam):
            plan = fam.plan(nd, npf)
            if plan.gpus != budget:
                continue
            sc = scenario_for(base, plan)
            for d in DISPATCH:
                cand, label = _with_dispatch(sc, d)
                key = f"{plan.label}, {label}"
                if key not in out:
                    out[key] = RankCandidate(label=key, topology=plan.topology, dispatch=label, scenario=cand)
    return list(out.values())


def _pick(options: list[RankCandidate], rng: np.random.Generator) -> tuple[RankCandidate, ...]:
    """k (uniform in 4-6, at most all) options: one per topology present, the rest at random."""
    k = min(int(rng.integers(4, 7)), len(options))
    order = [options[i] for i in rng.permutation(len(options))]
    chosen: list[RankCandidate] = []
    for top in ("colocated", "chunked", "disaggregated"):
        first = next((c for c in order if c.topology == top), None)
        if first is not None and len(chosen) < k:
            chosen.append(first)
    chosen += [c for c in order if c not in chosen][: k - len(chosen)]
    return tuple(sorted(chosen, key=lambda c: c.label))


def _pairs(family: str, budget: int) -> list[tuple[str, str, int]]:
    """(model, GPU, smallest TP) of ``family`` whose smallest layout has pp = 1 and fits half the budget."""
    out = []
    for model in FAMILIES[family]:
        for gpu in GPUS:
            lay = fit_layout(model, gpu)
            if lay is not None and lay[1] == 1 and 2 * lay[0] <= budget:
                out.append((model, gpu, lay[0]))
    return out


def _draw_group(i: int, decks: Decks, rng: np.random.Generator) -> RankGroup | None:
    """Group ``i``, or None when its draws leave fewer than 4 candidates (the caller draws again)."""
    from qmodel.registry import get_model
    from qmodel.workload import fit_context, length_mix

    f: dict[str, str] = {"model_family": decks.draw("model_family"), "budget": decks.draw("budget")}
    budget = int(f["budget"])
    pairs = _pairs(f["model_family"], budget)
    if not pairs:  # the family fits no half of this budget (MLA on 4 GPUs): the larger budget
        f["budget"], budget = BUDGETS[-1], int(BUDGETS[-1])
        pairs = _pairs(f["model_family"], budget)
    model, gpu, tp0 = pairs[int(rng.integers(len(pairs)))]
    f.update(model=model, gpu=gpu, min_tp=str(tp0))
    arr, f["arrival_source"] = draw_arrivals(decks.draw("arrivals"), rng)
    f["arrivals"] = "trace" if arr["kind"] == "trace" else "poisson" if arr["kind"] == "poisson" else (
        "gamma-cv0.5-1" if arr["cv"] <= 1.0 else "gamma-cv1-4")
    f["lengths"] = decks.draw("lengths")
    lengths, f["length_source"] = draw_lengths(f["lengths"], rng, get_model(model).max_context_tokens)
    max_batch = int(rng.choice(_MAX_BATCH))
    pbudget = int(rng.choice(_PREFILL_BUDGET))
    f["link"] = link = str(rng.choice(_LINKS))
    f.update(max_batch=str(max_batch), prefill_budget=str(pbudget))
    workload = {"arrivals": arr, "lengths": lengths}
    probe = {"model": model, "workload": workload, "slo": {"ttft_s": 1.0, "tpot_s": 1.0},
             "deployment": {"topology": "colocated", "pool": {"gpu": gpu}}}
    mix = length_mix(parse_scenario(probe).workload, iid=True)
    p, o, _ = fit_context(mix.prompt, mix.output, get_model(model).max_context_tokens)
    dep = {"topology": "colocated", "max_batch_tokens": pbudget,
           "pool": {"gpu": gpu, "tp": tp0, "pp": 1, "instances": 1, "max_batch": max_batch}}
    sc = {"name": f"rank-{i:03d}", "model": model, "workload": workload, "deployment": dep, "perf": {"kind": "roofline"}}
    sc["slo"] = draw_slo(sc, float(np.mean(p)), float(np.mean(o)), rng)
    base = parse_scenario(sc, source=f"ranking group {i}")
    tps = tuple(t for t in (1, 2, 4, 8) if tp0 <= t <= budget // 2)
    options = _options(base, gpu, tps, budget, link)
    if len(options) < 4:
        return None
    return RankGroup(id=f"g{i:03d}", features=f, candidates=_pick(options, rng))


def generate_groups(n: int, seed: int = 0, data: bool | None = None) -> RankCorpus:
    """``n`` ranking groups from ``seed``; ``data``: use the data-folder strata (None: when present).
    A draw with fewer than 4 candidates is drawn again (at most 10 tries per group)."""
    from qmodel.settings import data_dir

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError("--n", n, "a positive number of groups")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError("--seed", seed, "a non-negative integer")
    d = data_dir()
    use_data = (d is not None) if data is None else bool(data)
    if use_data and d is None:
        raise InputError("data", True, "a data folder (set QMODEL_DATA_DIR) for the data strata")
    axes = dict(RANK_AXES)
    skipped: list[str] = []
    if not use_data:
        why = "no data folder (QMODEL_DATA_DIR)" if d is None else "data strata turned off"
        for axis, vals in _DATA_VALUES.items():
            axes[axis] = tuple(v for v in axes[axis] if v not in vals)
            skipped += [f"{axis}={v}: {why}" for v in sorted(vals)]
    rng = np.random.default_rng([seed, _STREAM])
    decks = Decks(rng, axes)
    groups: list[RankGroup] = []
    for i in range(n):
        for _ in range(10):
            g = _draw_group(i, decks, rng)
            if g is not None:
                groups.append(g)
                break
        else:
            raise InputError("--seed", seed, f"a seed whose group {i} has 4 candidates in 10 draws")
    return RankCorpus(seed=seed, data=use_data, groups=tuple(groups), skipped=tuple(skipped))
