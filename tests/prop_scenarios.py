"""Scenarios for the property tests (issue 15, "Properties to add"): the bundled examples, the fuzz
suite's three small bases (tests/fuzz/cases.py), and variants of them made the way ``--set`` makes
them (:func:`qmodel.scenario.apply_overrides` on the scenario's JSON form, then
:func:`qmodel.scenario.parse_scenario`, so every variant is validated like user input).

An example that reads the public data folder (``data:`` references) is included only when its
files are present (:func:`tests.data_needs.missing_data`), so the property tests run, on fewer
scenarios, on a fresh clone with no data.

:func:`knobs` names, per topology, the fields the properties perturb: instance counts, TP, the link
bandwidth override and the SLO. :func:`variants` is the hypothesis strategy of (base, overrides).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

from hypothesis import HealthCheck, Phase, strategies as st

from qmodel.errors import QmodelError
from qmodel.scenario import DisaggregatedDeployment, Scenario, apply_overrides, load_scenario, parse_scenario
from tests.data_needs import missing_data
from tests.fuzz.cases import BASES

__all__ = ["PROP", "SCENARIOS", "CHEAP", "scenario", "variant", "knobs", "link_bandwidth", "variants", "label"]

#: the properties' hypothesis settings: deterministic (derandomize: the same examples on every run and in
#: CI), no deadline (a solve near saturation takes seconds), and the first failing example reported as
#: drawn, unshrunk (one shrink step re-solves a goodput search or a compare: minutes)
PROP = dict(deadline=None, derandomize=True, phases=(Phase.explicit, Phase.reuse, Phase.generate),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_DATA_REF = re.compile(r"data:([\w./-]+)")


def _available() -> list[str]:
    out = []
    for p in sorted(EXAMPLES.iterdir()):
        refs = sorted(set(_DATA_REF.findall(p.read_text(encoding="utf-8"))))
        if not refs or missing_data(*refs) is None:
            out.append(p.name)
    return out


#: every base a property draws from: example file names, then "fuzz:<topology>" for the fuzz bases
SCENARIOS: list[str] = _available() + [f"fuzz:{k}" for k in BASES]
#: bases whose goodput search and compare take well under a second (the fast suite's share)
CHEAP: list[str] = [s for s in SCENARIOS if s in ("opt13b-colocated-a100.yaml", "opt13b-disagg-a100.yaml",
                                                   "llama3-8b-chunked-h100.yaml", "llama3-8b-colocated-h100.yaml")
                    or s.startswith("fuzz:")]


@lru_cache(maxsize=None)
def scenario(name: str) -> Scenario:
    """A base scenario by name (an example's file name, or ``fuzz:<topology>``)."""
    if name.startswith("fuzz:"):
        return parse_scenario(BASES[name[5:]], name)
    return load_scenario(EXAMPLES / name)


@lru_cache(maxsize=4096)
def _variant(name: str, sets: tuple[str, ...]) -> Scenario:
    return parse_scenario(apply_overrides(scenario(name).model_dump(mode="json"), list(sets)), name)


def variant(name: str, sets: list[str] | tuple[str, ...]) -> Scenario:
    """The base ``name`` with ``--set`` overrides applied and validated (raises QmodelError)."""
    return _variant(name, tuple(sets))


def label(name: str, sets) -> str:
    return f"{name} " + " ".join(f"--set {s}" for s in sets)


def link_bandwidth(sc: Scenario) -> float:
    """The link bandwidth the scenario states: its override, else the catalog link's."""
    from qmodel.registry import get_link

    dep = sc.deployment
    return float(dep.link_bandwidth_bytes_per_s or get_link(dep.link).bandwidth_bytes_per_s)


def knobs(sc: Scenario) -> dict[str, list[str]]:
    """{"instances": [...], "tp": [...], "bandwidth": [...]}: the dotted fields of each kind."""
    if isinstance(sc.deployment, DisaggregatedDeployment):
        return {"instances": ["deployment.prefill.instances", "deployment.decode.instances"],
                "tp": ["deployment.prefill.tp", "deployment.decode.tp"],
                "bandwidth": ["deployment.link_bandwidth_bytes_per_s"]}
    return {"instances": ["deployment.pool.instances"], "tp": ["deployment.pool.tp"], "bandwidth": []}


def get(sc: Scenario, path: str):
    node = sc.model_dump(mode="json")
    for p in path.split("."):
        node = node[p]
    return node


@st.composite
def variants(draw, bases: list[str] = SCENARIOS, perturb: bool = True) -> tuple[str, tuple[str, ...]]:
    """(base name, overrides): a base, and with ``perturb`` a few of its knobs moved (instances by
    -1..+2, TP x1/x2, the link bandwidth x0.05..x4, the SLO targets x0.5..x2, the attainment goal);
    only overrides that validate and resolve are kept (a TP the model does not fit in is dropped)."""
    name = draw(st.sampled_from(bases))
    sc = scenario(name)
    sets: list[str] = []
    if perturb:
        k = knobs(sc)
        for path in k["instances"]:
            n = get(sc, path)
            d = draw(st.integers(-1, 2))
            if d and n + d >= 1:
                sets.append(f"{path}={n + d}")
        for path in k["tp"]:
            if draw(st.booleans()):
                sets.append(f"{path}={2 * get(sc, path)}")
        for path in k["bandwidth"]:
            f = draw(st.sampled_from([None, 0.05, 0.25, 1.0, 4.0]))
            if f is not None:
                sets.append(f"{path}={link_bandwidth(sc) * f:.6g}")
        for path in ("slo.ttft_s", "slo.tpot_s"):
            f = draw(st.sampled_from([None, 0.5, 2.0]))
            if f is not None:
                sets.append(f"{path}={get(sc, path) * f:.6g}")
        if draw(st.booleans()):
            sets.append(f"slo.attainment_goal={draw(st.sampled_from([0.5, 0.8, 0.95, 0.99]))}")
    kept: list[str] = []
    for s in sets:  # drop any override the model or memory refuses, keep the rest
        try:
            _resolved(name, tuple(kept + [s]))
        except QmodelError:
            continue
        kept.append(s)
    return name, tuple(kept)


@lru_cache(maxsize=4096)
def _resolved(name: str, sets: tuple[str, ...]):
    from qmodel.build import resolve

    return resolve(variant(name, sets))


def finite(*xs: float) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)
