"""Corpus strata for the expressiveness options of issue 18 §3: KV reservation, context window and
TPOT definition (docs/validation.md, "Expressiveness strata").

:func:`expressive_cases` derives one variant of each open-arrival case of a generated corpus
(:func:`qmodel.validation.corpus.generate`): it draws, from decks of its own seeded stream (so the
corpus's own draws, ids and features are untouched), the decoding pool's ``kv_reservation``
(actual / max_tokens), a context window (``none``: the model's; ``truncate`` / ``reject``: a
``deployment.max_context_tokens`` at the 95th percentile of the case's prompt + output, floor 2,
with ``workload.context_overflow`` set) and ``slo.tpot_definition`` (per_interval / per_token). A
variant the solver refuses (a max_tokens reservation no instance can hold, a window every request
overflows) falls back to the axis's first value, like the corpus's own fallbacks. Closed loops are
left out: their load is placed by the loop's own fixed point (:mod:`qmodel.validation.corpus_closed`),
which a new reservation or window would move. Each variant keeps its case's utilization (the runner
sets the rate from the variant's own limit) and is named ``<id>x``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qmodel.errors import InputError
from qmodel.scenario import parse_scenario
from qmodel.validation.corpus import Corpus, CorpusCase, Decks

__all__ = ["EXPRESSIVE_AXES", "expressive_cases"]

EXPRESSIVE_AXES: dict[str, tuple[str, ...]] = {
    "kv_reservation": ("actual", "max_tokens"),
    "context": ("none", "truncate", "reject"),
    "tpot_definition": ("per_interval", "per_token"),
}
_STREAM = 31  # the second word of this module's seed sequence: a stream the corpus never draws from


def _window(case: CorpusCase) -> int:
    """The 95th percentile of the case's prompt + output (the corpus's i.i.d. length draw), floor 2."""
    from qmodel.workload import length_mix

    mix = length_mix(case.scenario.workload, iid=True)
    return max(2, int(np.quantile(mix.prompt + mix.output, 0.95)))


def _variant(case: CorpusCase, f: dict[str, str]) -> dict[str, Any]:
    sc = case.scenario.model_dump(mode="json")
    dep = sc["deployment"]
    if f["kv_reservation"] == "max_tokens":
        dep["decode" if "decode" in dep else "pool"]["kv_reservation"] = "max_tokens"
    if f["context"] != "none":
        dep["max_context_tokens"] = _window(case)
        sc["workload"]["context_overflow"] = f["context"]
    sc["slo"]["tpot_definition"] = f["tpot_definition"]
    sc["name"] = f"{sc['name']}x"
    return sc


def _valid(sc: dict[str, Any]) -> bool:
    from qmodel.solver import Solver

    try:
        Solver(parse_scenario(sc)).max_stable_rate()
    except InputError:
        return False
    return True


def expressive_cases(corpus: Corpus) -> tuple[CorpusCase, ...]:
    """One variant per open-arrival case of ``corpus`` (module doc), in the corpus's order."""
    decks = Decks(np.random.default_rng([corpus.seed, _STREAM]), EXPRESSIVE_AXES)
    out = []
    for case in corpus.cases:
        if case.features["arrivals"] == "closed":
            continue
        f = {axis: decks.draw(axis) for axis in EXPRESSIVE_AXES}
        for axis in ("context", "kv_reservation"):  # fall back, most specific first, until the solver accepts it
            if _valid(_variant(case, f)):
                break
            f[axis] = EXPRESSIVE_AXES[axis][0]
        sc = _variant(case, f)
        if not _valid(sc):
            continue
        out.append(CorpusCase(id=f"{case.id}x", scenario=parse_scenario(sc), utilization=case.utilization,
                              features={**case.features, **f}))
    return tuple(out)
