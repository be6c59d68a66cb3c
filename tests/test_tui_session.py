"""The TUI's engine shows exactly what the library computes, and the app drives the real engine.

The TUI reuses stations across rate and SLO edits and composes once per solve; these tests pin
that the shortcuts change no number: every comparison with the library is exact equality
(same floating-point operations on the same inputs), not a tolerance.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from qmodel.solver import Solver
from qmodel.goodput import goodput, sensitivities
from qmodel.scenario import load_scenario
from qmodel.tui.app import QmodelApp
from qmodel.tui.compute import WhatIfSession
from qmodel.tui.form import DEFAULT_RAW, build, values_from_raw
from tui_fakes import settle

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _default():
    return build(values_from_raw(DEFAULT_RAW), DEFAULT_RAW).scenario


def test_first_stage_equals_the_library_solve() -> None:
    sc = _default()
    a = WhatIfSession().solve(sc)
    assert a.error is None and a.unstable is None
    assert a.result == Solver(sc).solve()
    # the plotted distributions are the composed ones: their percentiles are the Result's
    assert (a.ttft.p90_s, a.tpot.p99_s) == (a.result.ttft.p90, a.result.tpot.p99)


def test_rate_and_slo_edits_reuse_stations_without_changing_numbers() -> None:
    sc = _default()
    eng = WhatIfSession()
    eng.solve(sc)
    for edited in (sc.with_rate(3.3),
                   sc.model_copy(update={"slo": sc.slo.model_copy(update={"ttft_s": 0.35, "percentile": 99.0})})):
        a = eng.solve(edited)
        assert a.result == Solver(edited).solve()
    # the edited solvers share the first one's station objects (that is the point of the reuse)
    s0, s1 = eng.solver(sc), eng.solver(sc.with_rate(3.3))
    assert s0 is not s1 and s0._single_pool is s1._single_pool


def test_goodput_stage_equals_the_library_goodput() -> None:
    sc = _default()
    eng = WhatIfSession()
    a = eng.goodput(eng.solve(sc), lambda: False)
    ref = goodput(sc)
    assert a.goodput.goodput_rps == ref.goodput_rps
    assert a.goodput.binding == ref.binding
    mean_out = Solver(sc).resolved.lengths.mean_output
    assert a.usd_per_mtok == pytest.approx(ref.cost_per_hour_usd / (ref.goodput_rps * mean_out * 3600) * 1e6,
                                           rel=1e-15)


def test_sensitivities_equal_the_library(data_dir) -> None:
    sc = load_scenario(EXAMPLES / "opt13b-colocated-a100.yaml")
    eng = WhatIfSession()
    a = eng.sensitivities(eng.goodput(eng.solve(sc), lambda: False), lambda: False)
    ref = sensitivities(sc, goodput(sc).goodput_rps)
    assert [(s.input, s.elasticity) for s in a.sensitivities] == [(s.input, s.elasticity) for s in ref]


def test_unstable_rate_names_the_station_and_limit() -> None:
    sc = _default()
    lam, station = Solver(sc).max_stable_rate()
    a = WhatIfSession().solve(sc.with_rate(lam * 1.2))
    assert a.result is None and a.unstable.station == station
    assert a.unstable.max_stable_rate_per_s == pytest.approx(lam, rel=1e-12)


def test_app_on_the_real_engine_updates_and_replays() -> None:
    async def go():
        # goodput only after each solve: the curves, heatmap and sensitivities have their own tests
        app = QmodelApp(raw=DEFAULT_RAW, show_timings=False, replay_requests=1000, stages=(("goodput", "goodput"),))
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            app.set_field("workload.arrivals.rate_per_s", "3")
            await settle(app, pilot)
            sc = app.analysis.scenario
            assert sc.rate_per_s == 3.0 and app.analysis.result == Solver(sc).solve()
            assert app.analysis.goodput.goodput_rps == goodput(sc).goodput_rps
            await pilot.press("f6")
            await settle(app, pilot)
            chk = app.replay_check
            assert chk is not None and chk.requests == 1000 and chk.rate_per_s == 3.0
            names = [r[0] for r in chk.rows]
            assert "ttft_p90" in names and "attainment" in names
            assert all(r[2] >= 0 for r in chk.rows)
    asyncio.run(go())


def test_results_point_to_the_replay_key_not_the_cli_flag() -> None:
    from qmodel.tui.report import REPLAY_KEY
    from tui_fakes import view_text

    assert [b.key for b in QmodelApp.BINDINGS if b.action == "replay"] == [REPLAY_KEY.lower()]

    async def go():
        app = QmodelApp(str(EXAMPLES / "llama3-70b-disagg-h100.yaml"), show_timings=False, stages=())
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(app, pilot)
            assert "--check" in app.analysis.result.validity.text  # the library's sentence names the CLI flag
            text = " ".join(view_text(app, app.query_one("#results")).split())
            assert "--check" not in text
            assert f"check this scenario in the replay ({REPLAY_KEY})" in text
    asyncio.run(go())


def test_heatmap_cells_equal_the_library_goodput() -> None:
    """The heatmap's variants share stations (P + D of them for a P x D grid): every cell is still
    exactly the library's goodput of that split."""
    from qmodel.layouts import pd_split

    sc = load_scenario(EXAMPLES / "opt13b-disagg-a100.yaml")
    eng = WhatIfSession()
    h = eng.heatmap(eng.goodput(eng.solve(sc), lambda: False), lambda: False).heatmap
    cells = [(p, d, g) for d, row in zip(h.decode, h.goodput) for p, g in zip(h.prefill, row) if g is not None]
    assert len(cells) >= 4
    for p, d, g in cells:
        ref = goodput(pd_split(sc, p, d)).goodput_rps
        assert g == ref, (p, d)


def test_request_shape_fields_are_edited_and_solved_as_the_library_does() -> None:
    """The issue-18 §3 fields in the form (KV reservation, max output, context window, overflow, TPOT
    definition): each edit, on the real engine, recomputes, changes the answer, and the answer is
    exactly the library's for the scenario the form built."""
    from qmodel.tui.widgets import Choice

    async def go():
        app = QmodelApp(raw=DEFAULT_RAW, show_timings=False, stages=())
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            seen = [app.analysis.max_stable[0]]

            def check() -> Solver:
                s = Solver(app.analysis.scenario)
                assert app.analysis.result == s.solve() and app.analysis.max_stable[0] == s.max_stable_rate()[0]
                return s

            # an optional select starts blank (left out); Right steps to actual, then max_tokens
            choice = app.query_one("#f-deployment-pool-kv-reservation", Choice)
            assert choice.value == "" and choice.options == ["", "actual", "max_tokens"]
            choice.focus()
            await pilot.press("right", "right")
            await settle(app, pilot)
            assert app.analysis.scenario.deployment.pool.kv_reservation == "max_tokens"
            check()
            app.set_field("workload.max_output_tokens", "4096")
            await settle(app, pilot)
            assert app.analysis.scenario.workload.max_output_tokens == 4096
            check()
            seen.append(app.analysis.max_stable[0])
            assert seen[1] < seen[0]  # a 4096-token reservation holds fewer requests: a lower limit
            app.set_field("deployment.max_context_tokens", "2048")
            app.set_field("workload.context_overflow", "reject")
            await settle(app, pilot)
            check()
            assert app.analysis.result.rejected_fraction > 0.1
            app.set_field("slo.tpot_definition", "per_token")
            await settle(app, pilot)
            check()
            assert app.analysis.result.tbt is not None  # setting a TPOT definition adds TBT
            # back to blank: the field is left out again and the scenario is the one before
            app.set_field("slo.tpot_definition", "")
            await settle(app, pilot)
            assert app.analysis.scenario.slo.tpot_definition is None and app.analysis.result.tbt is None
    asyncio.run(go())
