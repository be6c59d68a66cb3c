"""Prices and cost (issue 21 "Prices and cost"): catalog prices, the scenario's ``prices:``
override, min-cost refusing unpriced GPUs, and $ per million input/output/total tokens.

Every cost figure comes from :mod:`qmodel.cost`; the identities below are exact (rel 1e-12).
"""

from __future__ import annotations

import json

import pytest

from qmodel.build import resolve
from qmodel.cli.main import main
from qmodel.cost import cost_per_hour_usd, price_table, token_prices
from qmodel.errors import CatalogError, InputError
from qmodel.planner import plan
from qmodel.registry import get_gpu, load_catalog
from qmodel.scenario import load_scenario
from tests.data_needs import EXAMPLES
from tests.planner_fakes import FakeEvaluator

DISAGG = EXAMPLES / "llama3-70b-disagg-h100.yaml"  # 16 x h100-sxm
#: catalog GPUs without a citable dated on-demand price (catalog/gpus.toml header); adding a price
#: to one of them must remove it here
UNPRICED = {"a30", "h800-sxm", "h20", "l20", "gb300", "mi355x", "arc-pro-b60"}


def test_catalog_prices_are_dated_and_sourced():
    gpus = load_catalog().gpus.values()
    assert {g.name for g in gpus if g.price_usd_per_hour is None} == UNPRICED
    for g in gpus:
        if g.price_usd_per_hour is not None:
            assert g.price_source and g.price_date[:4].isdigit(), g.name
    for name in ("h200-sxm", "b200", "mi300x", "rtx-pro-6000-server"):  # none before this change
        assert get_gpu(name).price_usd_per_hour > 0


def test_prices_override_replaces_the_catalog_price():
    base = resolve(load_scenario(DISAGG))
    assert base.cost_per_hour_usd == pytest.approx(16 * get_gpu("h100-sxm").price_usd_per_hour, rel=1e-12)
    r = resolve(load_scenario(DISAGG, ["prices.h100-sxm=2.0"]))
    assert r.cost_per_hour_usd == pytest.approx(32.0, rel=1e-12)
    assert price_table(["h100-sxm", "b200"], {"H100-SXM": 2.0}) == {"h100-sxm": 2.0,
                                                                    "b200": get_gpu("b200").price_usd_per_hour}
    assert cost_per_hour_usd([("h100-sxm", 4), ("l20", 2)], price_table(["h100-sxm", "l20"])) is None


@pytest.mark.parametrize(("sets", "field"), [(["prices.h100-sxmm=2"], "prices.h100-sxmm"),
                                             (["prices.h100-sxm=0"], "prices.h100-sxm"),
                                             (["prices.h100-sxm=-1"], "prices.h100-sxm")])
def test_bad_prices_are_one_line_errors(sets, field):
    with pytest.raises((InputError, CatalogError)) as err:
        resolve(load_scenario(DISAGG, sets))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_token_prices_identities():
    t = token_prices(48.0, 10.0, 1000.0, 200.0)
    per = 48.0 / (10.0 * 3600.0) * 1e6
    assert t.usd_per_million_input_tokens == pytest.approx(per / 1000.0, rel=1e-12)
    assert t.usd_per_million_output_tokens == pytest.approx(per / 200.0, rel=1e-12)
    assert 1 / t.usd_per_million_tokens == pytest.approx(
        1 / t.usd_per_million_input_tokens + 1 / t.usd_per_million_output_tokens, rel=1e-12)
    assert token_prices(None, 10.0, 1000.0, 200.0) is None and token_prices(48.0, 0.0, 1000.0, 200.0) is None


def test_goodput_reports_cost_and_token_prices(capsys):
    assert main(["goodput", str(DISAGG), "--set", "prices.h100-sxm=2.5", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert g["cost_per_hour_usd"] == pytest.approx(40.0, rel=1e-12)
    r = resolve(load_scenario(DISAGG))
    want = token_prices(40.0, g["goodput_rps"], r.mean_prompt_tokens, r.mean_output_tokens)
    for k, v in want.model_dump().items():
        assert g[k] == pytest.approx(v, rel=1e-12), k
    assert main(["goodput", str(DISAGG), "--set", "prices.h100-sxm=2.5"]) == 0
    assert "/M input" in capsys.readouterr().out


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(DISAGG)


def test_min_cost_with_an_unpriced_gpu_says_so(scenario):
    ev = FakeEvaluator(scenario)
    with pytest.raises(InputError) as err:
        plan(scenario, "min-cost", target_rate_per_s=5.0, evaluator=ev, executor="serial", gpus=["h100-sxm", "l20"],
             links=["ib-ndr-400"], tps=[1, 2], max_instances=4, knee=False)
    text = str(err.value)
    assert text.startswith("prices") and "l20" in text and "\n" not in text
    with pytest.raises(InputError):  # a $/h budget cannot be checked without the price either
        plan(scenario, "max-goodput", evaluator=ev, executor="serial", gpus=["h100-sxm", "l20"],
             links=["ib-ndr-400"], tps=[1, 2], max_instances=4, knee=False, budget={"cost_per_hour": 40.0})


def test_min_cost_uses_the_scenario_prices():
    """With A100 priced at 0.01 $/h the cheapest plans use it; at 100 $/h they do not."""
    small = dict(gpus=["h100-sxm", "a100-80gb-sxm"], links=["ib-ndr-400"], tps=[1, 2], max_instances=6, knee=False)
    rows = {}
    for p in (0.01, 100.0):
        sc = load_scenario(DISAGG, [f"prices.a100-80gb-sxm={p}"])
        res = plan(sc, "min-cost", target_rate_per_s=5.0, evaluator=FakeEvaluator(sc), executor="serial", top_k=1,
                   **small)
        rows[p] = res.plans[0]
    cheap, dear = rows[0.01], rows[100.0]
    assert "a100-80gb-sxm" in cheap.label and "a100-80gb-sxm" not in dear.label
    pools = [(pl.gpu, pl.gpus) for pl in (cheap.prefill, cheap.decode) if pl is not None]
    table = price_table([g for g, _ in pools], {"a100-80gb-sxm": 0.01})
    assert cheap.cost_per_hour == pytest.approx(cost_per_hour_usd(pools, table), rel=1e-12)
    assert cheap.usd_per_million_output_tokens == pytest.approx(
        cheap.cost_per_hour / (cheap.goodput_rps * 200 * 3600) * 1e6, rel=1e-12)  # the fake's 200 output tokens
    assert cheap.usd_per_million_input_tokens == pytest.approx(
        cheap.cost_per_hour / (cheap.goodput_rps * 1000 * 3600) * 1e6, rel=1e-12)  # and 1000 prompt tokens


def test_cli_min_cost_with_an_unpriced_gpu_exits_2(capsys):
    rc = main(["plan", str(DISAGG), "--objective", "min-cost", "--target-rate", "5", "--gpus", "h100-sxm,l20"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "l20" in err and "prices" in err
    rc = main(["goodput", str(DISAGG), "--set", "prices.h100-sxmm=2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "prices.h100-sxmm" in err and err.count("\n") == 0


def test_compare_reports_cost_at_the_scenario_prices(capsys):
    coloc = EXAMPLES / "llama3-8b-colocated-h100.yaml"  # 2 x h100-sxm TP1
    assert main(["compare", str(coloc), "--set", "prices.h100-sxm=1.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    r = resolve(load_scenario(coloc))
    for c in out["candidates"]:
        if c["reason"] is None:
            assert c["cost_per_hour_usd"] == pytest.approx(3.0, rel=1e-12)
            want = token_prices(3.0, c["goodput_rps"], r.mean_prompt_tokens, r.mean_output_tokens)
            assert c["usd_per_million_tokens"] == pytest.approx(want.usd_per_million_tokens, rel=1e-12)
