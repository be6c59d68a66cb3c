"""``qmodel perf import``: grid tables, the provenance header, and each importer's round trip
(import -> written table -> step time equals the source's), plus the CLI's one-line errors."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from qmodel.cli.main import main
from qmodel.errors import DataError, InputError
from qmodel.perf.grid import GridTableModel
from qmodel.perf.importers.measured import import_distserve, import_splitwise
from qmodel.perf.importers.vllm_bench import import_vllm_bench
from qmodel.perf.table_header import format_header, parse_header
from qmodel.perf.tables import load_distserve, load_qmodel_csv, load_splitwise

from vllm_bench_synth import CTX_COST, decode_s, prefill_s, write_run

ROOT = Path(__file__).resolve().parent.parent
DISTSERVE_VLLM = ROOT / "catalog" / "tables" / "distserve" / "profiler-a100-80g.vllm.json"
SPLITWISE = "splitwise_sim/perf_model.csv"
VIDUR_7B = "vidur/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"


def _roundtrip(table, tmp_path: Path, tp: int):
    path = tmp_path / "t.csv"
    sha = table.write(path)
    model = load_qmodel_csv(path, tp=tp)
    assert model.fingerprint == sha == table.to_model().fingerprint
    return model


# ---- grid model and header -------------------------------------------------------------------------

def _grid_fn(n, p):
    return (0.01 + 0.003 * n) * (p / 512.0) ** 1.3  # linear in n, a power law in p: the grid is exact on it


def test_grid_model_exact_on_a_bilinear_loglog_function():
    ns, ps = (1, 2, 4, 8), (64, 256, 1024, 4096)
    pre = [(float(n), float(p), _grid_fn(n, p)) for n in ns for p in ps]
    dec = [(float(n), float(c), 0.005 + 1e-4 * n + 2e-8 * n * c) for n in ns for c in (128.0, 4096.0)]
    m = GridTableModel(pre, dec, sha256="x", source="synthetic")
    rng = np.random.default_rng(1)
    n = rng.uniform(1, 8, 500)
    p = rng.uniform(64, 4096, 500)
    got = m.prefill_time_s(n * p, n * p * p, n)
    np.testing.assert_allclose(got, _grid_fn(n, p), rtol=1e-12)  # exact up to float round-off
    c = rng.uniform(128, 4096, 500)
    np.testing.assert_allclose(m.decode_step_time_s(n, n * c), 0.005 + 1e-4 * n + 2e-8 * n * c, rtol=1e-12)
    # the scalar fast path evaluates the same formulas
    assert m.prefill_time_s(float(n[0] * p[0]), float(n[0] * p[0] ** 2), float(n[0])) == pytest.approx(got[0], rel=1e-12)
    assert m.extrapolated == {"prefill": 0, "decode": 0}
    m.decode_step_time_s(16.0, 16.0 * 100)
    assert m.extrapolated["decode"] == 1 and m.prefill_time_s(0.0, 0.0, 0.0) == 0.0


def test_grid_layout_needs_every_cell(tmp_path):
    text = format_header({"layout": "grid"}) + "phase,batch_size,prompt_tokens,context_tokens,time_s\n" + "".join(
        f"prefill,{n},{p},,{0.01 * n * p / 512}\n" for n, p in ((1, 512), (1, 1024), (2, 512))) + "".join(
        f"decode,{n},,{c},0.01\n" for n in (1, 2) for c in (128, 512))
    (tmp_path / "g.csv").write_text(text)
    with pytest.raises(DataError, match=r"1 prefill \(batch_size, prompt lengths\) cell\(s\) missing, e.g. \(2, 1024\)"):
        load_qmodel_csv(tmp_path / "g.csv", tp=1)


def test_header_parse_and_plain_comments_unchanged():
    h = parse_header(format_header({"layout": "grid", "source_file": ["a sha256=1", "b sha256=2"], "tp": "4"}))
    assert h == {"qmodel-table": "1", "layout": "grid", "source_file": ["a sha256=1", "b sha256=2"], "tp": "4"}
    # a hand-written table whose comments look like keys is not a header (it loads as before)
    assert parse_header("# Note: measured by hand\nphase,batch_size\n") == {}


# ---- splitwise-sim and DistServe ---------------------------------------------------------------------

@pytest.mark.needs_data(SPLITWISE)
def test_splitwise_import_reproduces_the_table_exactly(data_dir, tmp_path):
    # Every (model, hardware, tp) group: the written medians give the same SweepTableModel, so step
    # times agree to float round-off (rtol 1e-12) at measured and interpolated queries alike.
    groups = [("llama2-70b", hw, tp) for hw in ("a100-80gb", "h100-80gb", "h100-80gb-pcap") for tp in (2, 4, 8)]
    groups += [("bloom-176b", hw, 8) for hw in ("a100-80gb", "h100-80gb", "h100-80gb-pcap")]
    rng = np.random.default_rng(0)
    for mk, hk, tp in groups:
        src = load_splitwise(data_dir / SPLITWISE, mk, hk, tp)
        got = _roundtrip(import_splitwise(str(data_dir / SPLITWISE), mk, hk, tp), tmp_path, tp)
        n = rng.integers(1, 64, 200).astype(float)
        p = rng.integers(128, 8192, 200).astype(float)
        np.testing.assert_allclose(got.prefill_time_s(n * p, n * p * p, n), src.prefill_time_s(n * p, n * p * p, n),
                                   rtol=1e-12)
        np.testing.assert_allclose(got.decode_step_time_s(n, n * p), src.decode_step_time_s(n, n * p), rtol=1e-12)
    # the impossible median splitwise-sim holds (llama2-70b tp2 A100, 64 x 512) is left out and named
    t = import_splitwise(str(data_dir / SPLITWISE), "llama2-70b", "a100-80gb", 2)
    assert any("left out as impossible: prefill batch 64" in n for n in t.header["note"])


def test_distserve_import_matches_the_fitted_formula(tmp_path):
    # Grid sampling of DistServe's formula: decode is exact (linear in context and, per regime, in
    # batch); prefill differs only by the log-log interpolation in prompt length, measured at most
    # 0.114% over these 2,000 random queries per profile, so the tolerance is 0.15%.
    rng = np.random.default_rng(0)
    n = rng.integers(1, 17, 2000).astype(float)
    p = rng.integers(16, 4097, 2000).astype(float)
    nb = rng.integers(1, 257, 2000).astype(float)
    for mk, tp in (("facebook/opt-13b", 1), ("facebook/opt-13b", 4), ("facebook/opt-66b", 8)):
        src = load_distserve(DISTSERVE_VLLM, mk, tp)
        got = _roundtrip(import_distserve(str(DISTSERVE_VLLM), mk, tp), tmp_path, tp)
        np.testing.assert_allclose(got.prefill_time_s(n * p, n * p * p, n), src.prefill_time_s(n * p, n * p * p, n),
                                   rtol=1.5e-3)
        np.testing.assert_allclose(got.decode_step_time_s(nb, nb * p), src.decode_step_time_s(nb, nb * p), rtol=1e-12)


def test_imported_table_solves_like_its_source(tmp_path, capsys):
    # The bundled example solved with DistServe's JSON and with the imported table: 512-token
    # prompts sit on grid nodes, so TTFT/TPOT agree to float round-off.
    out = tmp_path / "opt13b.csv"
    assert main(["perf", "import", "distserve", str(DISTSERVE_VLLM), "--model-key", "facebook/opt-13b", "--tp", "1",
                 "-o", str(out)]) == 0
    ex = str(ROOT / "examples" / "opt13b-colocated-a100.yaml")
    capsys.readouterr()
    assert main(["solve", ex, "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["solve", ex, "--set", f"perf.path={out}", "--set", "perf.format=qmodel", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    for metric in ("ttft", "tpot"):
        for q in ("mean_s", "p90_s", "p99_s"):
            assert b[metric][q] == pytest.approx(a[metric][q], rel=1e-9)


# ---- Vidur -------------------------------------------------------------------------------------------

def _vidur_layer_ms(mlp: Path, tokens: int, tp: int) -> float:
    """Independent reference: the sum of Vidur's per-layer operator medians at a profiled token count."""
    ops = ("attn_pre_proj", "attn_rope", "attn_post_proj", "input_layernorm", "mlp_up_proj", "mlp_act",
           "mlp_down_proj", "post_attention_layernorm", "add")
    vals = defaultdict(list)
    with mlp.open() as fh:
        for r in csv.DictReader(fh):
            if int(r["num_tokens"]) == tokens and int(r["num_tensor_parallel_workers"]) == tp:
                for op in ops:
                    vals[op].append(float(r[f"time_stats.{op}.median"]))
    return sum(float(np.median(v)) for v in vals.values())


@pytest.mark.needs_data(VIDUR_7B, "vidur/profiling/network/a100_dgx/all_reduce.csv")
def test_vidur_import_sums_the_operator_profiles(data_dir, tmp_path):
    from qmodel.perf.importers.vidur import import_vidur

    mlp = data_dir / VIDUR_7B
    t = import_vidur(str(data_dir / "vidur" / "profiling"), "meta-llama/Llama-2-7b-hf", "a100", 1, 32)
    m = _roundtrip(t, tmp_path, 1)
    # prefill 1 x 512 and 2 x 256 are the same 512 tokens (no attention profile): 32 layers x the ops
    ref = 32 * _vidur_layer_ms(mlp, 512, 1) / 1000.0
    assert m.prefill_time_s(512.0, 512.0**2, 1.0) == pytest.approx(ref, rel=1e-12)
    assert m.prefill_time_s(512.0, 2 * 256.0**2, 2.0) == pytest.approx(ref, rel=1e-12)
    ref_dec = 32 * _vidur_layer_ms(mlp, 32, 1) / 1000.0
    assert m.decode_step_time_s(32.0, 32 * 128.0) == pytest.approx(ref_dec, rel=1e-12)
    assert m.decode_step_time_s(32.0, 32 * 4096.0) == pytest.approx(ref_dec, rel=1e-12)  # context omitted
    assert any("omits attention kernels" in n for n in t.header["note"])
    # tp 2 adds two all-reduces per layer, so the step is longer than the tp-2 operators alone
    t2 = import_vidur(str(data_dir / "vidur" / "profiling"), "meta-llama/Llama-2-7b-hf", "a100", 2, 32).to_model()
    assert t2.prefill_time_s(512.0, 512.0**2, 1.0) > 32 * _vidur_layer_ms(mlp, 512, 2) / 1000.0
    with pytest.raises(InputError, match="--hardware-key"):
        import_vidur(str(data_dir / "vidur" / "profiling"), "meta-llama/Llama-2-7b-hf", "b100", 1, 32)


# ---- vllm bench serve --------------------------------------------------------------------------------

def test_vllm_bench_fit_recovers_the_generating_model(tmp_path):
    # Synthetic runs at concurrency 1, 4, 16 from a known model (tests/vllm_bench_synth.py): the
    # Little's-law batch is exactly the concurrency and the ITLs lie on h(n) + c * S, so decode is
    # recovered to float round-off (1e-9); prefill rows are the quadratic exactly (1e-9) and in
    # between the log-log interpolation is within 0.1% (measured 0.095% at p = 777).
    paths = [str(write_run(tmp_path / f"c{c}.json", c)) for c in (1, 4, 16)]
    m = _roundtrip(import_vllm_bench(paths, tp=1), tmp_path, 1)
    for n in (1.0, 4.0, 16.0):
        for ctx in (100.0, 1000.0, 4000.0):
            assert m.decode_step_time_s(n, n * ctx) == pytest.approx(decode_s(n, n * ctx), rel=1e-9)
    assert m.context_cost_s_per_token == pytest.approx(CTX_COST, rel=1e-9)
    for p in (64.0, 512.0, 2048.0, 4096.0):
        assert m.prefill_time_s(p, p * p, 1.0) == pytest.approx(prefill_s(p), rel=1e-9)
    for p in (100.0, 777.0, 3000.0):
        assert m.prefill_time_s(p, p * p, 1.0) == pytest.approx(prefill_s(p), rel=1e-3)


def test_vllm_bench_refuses_what_it_cannot_fit(tmp_path):
    one = str(write_run(tmp_path / "c1.json", 1))
    with pytest.raises(InputError, match="two or more concurrencies"):
        import_vllm_bench([one, str(write_run(tmp_path / "again.json", 1))], tp=1)
    (tmp_path / "bad.json").write_text(json.dumps({"duration": 1.0, "ttfts": []}))
    with pytest.raises(DataError, match="missing input_lens, itls"):
        import_vllm_bench([str(tmp_path / "bad.json"), one], tp=1)


# ---- CLI ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, field", [
    (["perf", "import", "nosuch", "--tp", "1"], "SOURCE: 'nosuch'"),
    (["perf", "import", "distserve", "--tp", "1", "--model-key", "facebook/opt-13b"], "PATH: []"),
    (["perf", "import", "distserve", "/nonexistent.json", "--tp", "1", "--model-key", "facebook/opt-13b"],
     "/nonexistent.json"),
    (["perf", "import", "distserve", str(DISTSERVE_VLLM), "--tp", "3", "--model-key", "facebook/opt-13b"], "tp"),
    (["perf", "import", "distserve", str(DISTSERVE_VLLM), "--tp", "0"], "--tp: 0"),
    (["perf", "import", "distserve", str(DISTSERVE_VLLM), "--tp", "1"], "--model-key"),
    (["perf", "import", "vllm-bench", str(DISTSERVE_VLLM), "x.json", "--tp", "1"], "not a vllm bench serve result"),
    (["calibrate", "--model", "opt-13b", "--gpu", "a100-80gb-sxm", "--tp", "1"], "TABLE: []"),
])
def test_cli_bad_source_is_one_line_exit_2(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("qmodel: error: ") and err.count("\n") == 1 and field in err, err


def test_perf_import_to_stdout_and_calibrate_from_a_source(capsys):
    assert main(["perf", "import", "distserve", str(DISTSERVE_VLLM), "--model-key", "facebook/opt-13b",
                 "--tp", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# qmodel-table: 1\n# layout: grid\n# source: distserve\n")
    assert "sha256=ab24e00e0e1165fc45c9fbaeaa36aeb1f67cfe21d3961cb995b385a31c95f751" in text  # the source file's
    assert main(["calibrate", "--source", "distserve", str(DISTSERVE_VLLM), "--model-key", "facebook/opt-13b",
                 "--model", "opt-13b", "--gpu", "a100-80gb-sxm", "--tp", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["points"] == {"prefill": 165, "decode": 77}
    assert rep["mape_after"]["prefill"] < rep["mape_before"]["prefill"]
    assert set(rep["params"]) >= {"mfu", "mbu", "prefill_overhead_s", "decode_overhead_s"}


def test_calibrate_from_a_source_prints_the_perf_block(capsys):
    assert main(["calibrate", "--source", "distserve", str(DISTSERVE_VLLM), "--model-key", "facebook/opt-13b",
                 "--model", "opt-13b", "--gpu", "a100-80gb-sxm", "--tp", "1"]) == 0
    out = capsys.readouterr().out
    assert "(165 prefill, 77 decode points)" in out
    block = out[out.index("perf:\n"):].splitlines()
    assert block[1] == "  kind: roofline" and {ln.split(":")[0].strip() for ln in block[2:]} >= {"mfu", "mbu"}


def test_unknown_layout_is_refused(tmp_path):
    text = format_header({"layout": "cube"}) + "phase,batch_size,prompt_tokens,context_tokens,time_s\n" + \
        "prefill,1,512,,0.1\nprefill,1,1024,,0.2\ndecode,1,,512,0.01\ndecode,2,,512,0.011\n"
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises(DataError, match="header 'layout: cube' is not one of sweep, grid"):
        load_qmodel_csv(tmp_path / "c.csv", tp=1)


@pytest.mark.needs_data("vidur/profiling/compute/h100/microsoft/phi-2/mlp.csv")
def test_vidur_model_without_an_operator_column(data_dir):
    # phi-2's parallel attention/MLP block has one layernorm: its profile has no
    # post_attention_layernorm column, and the importer sums the operators the profile holds
    # (main would have no importer at all; a first version refused this file).
    from qmodel.perf.importers.vidur import import_vidur

    t = import_vidur(str(data_dir / "vidur" / "profiling"), "microsoft/phi-2", "h100", 1, 32)
    assert "post_attention_layernorm" not in t.header["method"] and "input_layernorm" in t.header["method"]
    assert t.to_model().decode_step_time_s(1.0, 128.0) > 0
