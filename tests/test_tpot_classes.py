"""A trace's rate classes are solved for the one metric that reads them (docs/startup.md, round 8):
a TPOT class without the prefill pool's wait grids (``PrefillStation.solve(rate, grids=False)``
leaves W, W + S_own and S_own lazy with their step announced; ``DisaggregatedTopology.compose_tpot``),
a TTFT class without the link and the decode pool (``compose_ttft``, first token from prefill).
Each must be ``compose``'s answer bit for bit (exact equality: the same code runs, only later or
not at all), and the trace example's solve must equal the all-eager composition's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from qmodel.dist import GridDist, LazyGridDist
from qmodel.errors import NumericalError
from qmodel.scenario import load_scenario, parse_scenario
from qmodel.solver import Solver

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LOADS = (0.2, 0.6, 0.9, 0.97)


def _same(a: GridDist, b: GridDist) -> None:
    for f in dataclasses.fields(GridDist):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y or (x != x and y != y)), f.name


def test_an_announced_step_builds_nothing_and_is_checked() -> None:
    built: list[int] = []
    law = GridDist(0.5, np.array([0.25, 0.75]), 0.375)

    def build() -> GridDist:
        built.append(1)
        return law

    lazy = LazyGridDist(build, dx=0.5)
    assert lazy.dx == 0.5 and not built
    assert lazy.mean_s == 0.375 and built == [1]
    with pytest.raises(NumericalError):
        _ = LazyGridDist(lambda: law, dx=0.25).pmf


def _solver(name: str, first: str | None = None) -> Solver:
    sc = load_scenario(EXAMPLES / name)
    if first is not None:
        d = sc.model_dump(mode="json")
        d["deployment"]["first_token_from"] = first
        sc = parse_scenario(d)
    return Solver(sc)


@pytest.mark.parametrize("load", LOADS)
def test_lazy_prefill_grids_are_the_eager_ones(load: float) -> None:
    solver = _solver("llama3-70b-disagg-h100.yaml")
    st = solver.station("prefill")
    rate = load * st.max_stable_rate_per_s()
    eager, lazy = st.solve(rate), st.solve(rate, grids=False)
    assert lazy.delay.dx == eager.delay.dx and lazy.wait.dx == eager.wait.dx  # before any build
    for x, y in [(eager.wait, lazy.wait), (eager.delay, lazy.delay), (eager.extra["own_batch_time"], lazy.extra["own_batch_time"])]:
        _same(x, y)
    assert np.array_equal(eager.extra["own_batch_time_per_prompt_s"], lazy.extra["own_batch_time_per_prompt_s"])


@pytest.mark.parametrize("first", ["prefill", "decode"])
@pytest.mark.parametrize("laws", [False, True])
def test_compose_tpot_is_composes_tpot(first: str, laws: bool) -> None:
    solver = _solver("llama3-70b-disagg-h100.yaml", first)
    lim = solver.max_stable_rate()[0]
    for load in LOADS:
        rate = load * lim
        c = solver.topology.compose(solver, rate, laws)
        stations, tpot, b = solver.topology.compose_tpot(solver, rate, laws)
        assert b == c.tpot_attainment
        _same(tpot, c.tpot)
        for x, y in zip(stations[1:], c.stations[1:]):  # the link and decode solutions
            _same(x.delay, y.delay)


@pytest.mark.parametrize("laws", [False, True])
def test_compose_ttft_is_composes_ttft(laws: bool) -> None:
    solver = _solver("llama3-70b-disagg-h100.yaml", "prefill")
    lim = solver.max_stable_rate()[0]
    for load in LOADS:
        c = solver.topology.compose(solver, load * lim, laws)
        ttft, a = solver.topology.compose_ttft(solver, load * lim, laws)
        assert a == c.ttft_attainment
        _same(ttft, c.ttft)
    from_decode = _solver("llama3-70b-disagg-h100.yaml", "decode")
    assert from_decode.topology.compose_ttft(from_decode, 0.5 * lim, laws) is None


@pytest.mark.needs_data("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "splitwise_sim/perf_model.csv")
def test_the_trace_example_equals_its_all_eager_composition(monkeypatch: pytest.MonkeyPatch) -> None:
    """compose_windows with every class fully composed (compose_tpot replaced by compose,
    compose_ttft declining) gives the same attainments and laws: what the classes skip is read by
    nothing."""
    sc = load_scenario(EXAMPLES / "azure-conv-trace-disagg-a100.yaml")
    fast = Solver(sc).solve()
    topo_cls = type(Solver(sc).topology)

    def eager_tpot(self, solver, rate, laws):
        c = self.compose(solver, rate, laws)
        return c.stations, c.tpot, c.tpot_attainment

    monkeypatch.setattr(topo_cls, "compose_tpot", eager_tpot)
    monkeypatch.setattr(topo_cls, "compose_ttft", lambda self, solver, rate, laws: None)
    slow = Solver(sc).solve()
    assert fast.model_dump() == slow.model_dump()


def test_the_central_queue_path_takes_the_same_arguments() -> None:
    """least_loaded dispatch without batching is the central M/G/c queue (``_solve_central``): the
    class paths' arguments reach it too, and its answer does not depend on them."""
    sc = load_scenario(EXAMPLES / "llama3-70b-disagg-h100.yaml")
    d = sc.model_dump(mode="json")
    d["deployment"]["prefill"].update(max_batch_tokens=1024, dispatch="least_loaded", instances=4)
    d["workload"]["lengths"] = {"kind": "fixed", "prompt_tokens": 900, "output_tokens": 200}  # one prompt a batch
    solver = Solver(parse_scenario(d))
    st = solver.station("prefill")
    assert st.b == 1 and st.instances > 1  # the central path
    rate = 0.6 * st.max_stable_rate_per_s()
    eager, lean = st.solve(rate), st.solve(rate, grids=False, per_prompt=False)
    _same(eager.delay, lean.delay)
    assert solver.topology.compose_ttft(solver, rate, False)[1] == solver.topology.compose(solver, rate, False).ttft_attainment
