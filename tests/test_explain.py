"""--explain prints the closed forms with the scenario's numbers, and they agree with the engine."""

from pathlib import Path

import pytest

from qmodel.solver import Solver
from qmodel.explain import explain_scenario
from qmodel.scenario import load_scenario

EX = Path(__file__).resolve().parent.parent / "examples"


def test_explain_disaggregated_blocks_and_values():
    solver = Solver(load_scenario(EX / "llama3-70b-disagg-h100.yaml"))
    blocks = explain_scenario(solver, 6.0)
    text = "\n".join(blocks)
    assert "kv = 327680 B" in text  # Llama-3.1-70B bf16: 80 x 2 x 8 x 128 x 2 bytes
    assert "link bandwidth that hides the KV handoff" in text
    # The decode mean-TPOT closed form is the engine's own affine fit evaluated symbolically.
    c = solver.compose(6.0)
    ex = c.stations[2].extra
    lam = 6.0 / solver.scenario.deployment.decode.instances
    el = float(solver.resolved.lengths.output.mean())
    expected = (ex["a_s"] + ex["beta_s"]) / (1 - lam * el * ex["beta_s"])
    line = [ln for ln in text.splitlines() if ln.strip().startswith("TPOT = ") and "s" in ln and "(" not in ln]
    assert line, text
    assert float(line[-1].split("=")[1].split()[0]) == pytest.approx(expected, rel=1e-5)


def test_explain_mla_model():
    solver = Solver(load_scenario(EX / "deepseek-v3-disagg-h200.json"))
    text = "\n".join(explain_scenario(solver, 1.0))
    assert "MLA" in text and "70272" in text.replace(",", "")


@pytest.mark.parametrize("name", ["llama3-8b-colocated-h100.yaml", "llama3-8b-chunked-h100.yaml"])
def test_explain_single_pool_reads_its_decode_station(name):
    """A single pool's decode runs in its one station (role 'colocated'/'chunked', pool role 'pool'):
    --explain looked it up by the pool's role and raised ValueError."""
    solver = Solver(load_scenario(EX / name))
    blocks = explain_scenario(solver, 0.5 * solver.max_stable_rate()[0])
    assert blocks and all(isinstance(b, str) for b in blocks)
