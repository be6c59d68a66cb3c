"""``qmodel perf import aic``: the AIConfigurator database's static estimates in a qmodel table.

Needs the optional extra ``qmodel[aic]`` (skips cleanly without it). The database ships inside the
``aiconfigurator-core`` wheel, so no data folder is needed.
"""

from __future__ import annotations

import builtins
import importlib.util

import numpy as np
import pytest

from qmodel.cli.main import main
from qmodel.errors import InputError

MODEL, SYSTEM = "meta-llama/Meta-Llama-3.1-8B", "h200_sxm"

needs_aic = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator") is None,
                               reason="needs the optional extra: pip install 'qmodel[aic]'")


@pytest.fixture(scope="module")
def aic_table():
    pytest.importorskip("aiconfigurator.cli.api")
    from qmodel.perf.importers.aic import import_aic

    return import_aic(MODEL, SYSTEM, 1, backend="vllm")


@needs_aic
def test_grid_nodes_are_the_databases_static_estimates(aic_table, tmp_path):
    # At every node the table holds AIC's own number; read back from the written file, the step
    # time at a node equals AIC's static estimate to float round-off (rtol 1e-12).
    from qmodel.perf.importers.aic import aic_static_ms
    from qmodel.perf.tables import load_qmodel_csv

    path = tmp_path / "aic.csv"
    aic_table.write(path)
    m = load_qmodel_csv(path, tp=1)
    version = aic_table.header["backend"].split()[1]
    for n, p in ((1, 512), (4, 2048), (16, 32768)):
        ms, _ = aic_static_ms(MODEL, SYSTEM, 1, mode="static_ctx", batch_size=n, isl=p, osl=1, backend_version=version)
        assert m.prefill_time_s(float(n * p), float(n * p * p), float(n)) == pytest.approx(ms / 1000, rel=1e-12)
    for n, c in ((1, 128), (32, 4096), (512, 32768)):
        ms, _ = aic_static_ms(MODEL, SYSTEM, 1, mode="static_gen", batch_size=n, isl=c, osl=2, backend_version=version)
        assert m.decode_step_time_s(float(n), float(n * c)) == pytest.approx(ms / 1000, rel=1e-12)
    assert m.describe()["provenance"]["source"] == "aic"
    assert "sha256=" in m.describe()["provenance"]["source_file"][0]


@needs_aic
def test_off_grid_agreement_with_aic_static_estimates(aic_table):
    # Off the nodes the table interpolates; AIC's GEMM tables jump at tile boundaries, so agreement
    # is measured, not exact: benchmarks/perf_import_aic.py gives mean 0.40% / max 2.18% (prefill)
    # and 0.17% / 0.62% (decode) on 8 + 8 points (docs/perf_import.md). Tolerances: mean 1% and
    # max 2.5% for prefill (a prefill next to a jump), mean 0.5% and max 1% for decode.
    from qmodel.perf.importers.aic import aic_static_ms

    m = aic_table.to_model()
    version = aic_table.header["backend"].split()[1]
    pre = []
    for n, p in ((1, 700), (1, 3000), (3, 1500), (6, 3000), (5, 6000), (2, 10000)):
        ms, _ = aic_static_ms(MODEL, SYSTEM, 1, mode="static_ctx", batch_size=n, isl=p, osl=1, backend_version=version)
        pre.append(1000 * m.prefill_time_s(float(n * p), float(n * p * p), float(n)) / ms - 1)
    dec = []
    for n, isl, osl in ((3, 600, 64), (12, 2000, 64), (48, 6000, 64), (100, 3000, 64), (200, 700, 64)):
        ms, _ = aic_static_ms(MODEL, SYSTEM, 1, mode="static_gen", batch_size=n, isl=isl, osl=osl,
                              backend_version=version)
        ctx = np.arange(isl, isl + osl - 1, dtype=float)  # the osl - 1 decode steps TPOT averages
        dec.append(1000 * float(np.mean(m.decode_step_time_s(np.full_like(ctx, n), n * ctx))) / ms - 1)
    assert np.abs(pre).mean() <= 0.01 and np.abs(pre).max() <= 0.025, pre
    assert np.abs(dec).mean() <= 0.005 and np.abs(dec).max() <= 0.01, dec


@needs_aic
def test_aic_names_are_checked_offline(capsys):
    assert main(["perf", "import", "aic", "--model-key", "meta-llama/Llama-3.1-8B", "--hardware-key", SYSTEM,
                 "--tp", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'meta-llama/Meta-Llama-3.1-8B'" in err
    assert main(["perf", "import", "aic", "--model-key", MODEL, "--hardware-key", SYSTEM, "--tp", "3"]) == 2
    assert "divisible by tp_size 3" in capsys.readouterr().err


def test_without_the_extra_the_error_names_it(monkeypatch):
    real_import = builtins.__import__

    def no_aic(name, *args, **kwargs):
        if name.startswith("aiconfigurator"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_aic)
    from qmodel.perf.importers.aic import import_aic

    with pytest.raises(InputError, match=r"pip install 'qmodel\[aic\]'"):
        import_aic(MODEL, SYSTEM, 1)
