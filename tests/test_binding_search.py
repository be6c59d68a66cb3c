"""The KV link's bandwidth search (qmodel.binding.ShareSearch) returns what the plain bisection on
log bandwidth returns, to the bit: on monotone share laws of several shapes (exact: the search
only skips evaluations that monotonicity decides), and on the disaggregated examples' link at
several loads (the link re-solved at each point), with fewer link solves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from data_needs import example_needs
from qmodel.binding import LINK_SHARE, ShareSearch


class PlainBisection(ShareSearch):
    """The search before it guessed: no guesses, every decision an evaluation."""

    GUESSES = 0

    def __init__(self, share, floor: float) -> None:
        super().__init__(share, floor)
        self.calls = 0

    def decided(self, bw: float) -> bool | None:
        return None

    def evaluate(self, bw: float) -> float:
        self.calls += 1
        return self.share(bw)


class CountedSearch(ShareSearch):
    def __init__(self, share, floor: float) -> None:
        super().__init__(share, floor)
        self.calls = 0

    def evaluate(self, bw: float) -> float:
        self.calls += bw not in self.known
        return super().evaluate(bw)


LAWS = {
    "1/(bw-floor)": lambda floor, k: (lambda bw: math.inf if bw <= floor else k / (bw - floor)),
    "steep": lambda floor, k: (lambda bw: math.inf if bw <= floor else (k / (bw - floor)) ** 3),
    "flat": lambda floor, k: (lambda bw: math.inf if bw <= floor else k / math.sqrt(bw - floor) + 0.02),
    "step": lambda floor, k: (lambda bw: 1.0 if bw < floor * (1 + k) else 0.0),
    "zero": lambda floor, k: (lambda bw: 0.0),
}


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("k", [1e-3, 0.05, 1.0, 30.0, 5e3])
@pytest.mark.parametrize("first", [True, False])
def test_search_equals_plain_bisection_on_monotone_laws(law: str, k: float, first: bool) -> None:
    floor = 1.0e9
    share = LAWS[law](floor, k * floor / 100.0 if law != "step" else k)
    lo, hi = (floor * (1.0 + 1e-6), 8.0e10) if first else (2.0e10, 8.0e10)
    plain, search = PlainBisection(share, floor), CountedSearch(share, floor)
    # as link_report: the available bandwidth is tested first (where it is ok, the search starts)
    assert plain.ok(hi) == search.ok(hi)
    want = plain.bisect(lo, hi, lo if first else None)
    got = search.bisect(lo, hi, lo if first else None)
    assert got == want  # bit-identical
    # guesses cost at most GUESSES evaluations beyond the plain search; where the law is smooth,
    # far fewer than it
    assert search.calls <= plain.calls + ShareSearch.GUESSES
    if law in ("1/(bw-floor)", "steep") and first:
        assert search.calls <= plain.calls // 2 + 1


EXAMPLES = ["llama3-70b-disagg-h100", "opt13b-disagg-a100", "llama2-70b-disagg-splitwise"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=example_needs(n)) for n in EXAMPLES])
@pytest.mark.parametrize("load", [0.1, 0.5, 0.9, 0.97])
def test_link_report_equals_plain_bisection(name: str, load: float, monkeypatch: pytest.MonkeyPatch) -> None:
    import qmodel.binding as binding
    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario

    (path,) = (Path(__file__).resolve().parent.parent / "examples").glob(f"{name}.*")
    solver = Solver(load_scenario(path))
    c = solver.compose(load * solver.max_stable_rate()[0], laws=True)
    searches: list[ShareSearch] = []
    for cls in (PlainBisection, CountedSearch):
        monkeypatch.setattr(binding, "ShareSearch", lambda share, floor, cls=cls: searches.append(cls(share, floor)) or searches[-1])
        searches.append(binding.link_report(solver, c))
    plain, want, counted, got = searches
    assert got.model_dump() == want.model_dump()  # bit-identical, the bandwidth need included
    assert counted.calls < plain.calls
