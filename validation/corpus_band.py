"""An error-band model fitted on the generated corpus (issue 18 §4, measured only: not wired into solve).

For each latency metric (TTFT/TPOT p50/p90/p99) the model predicts the 90% band of the analytic
engine's |relative error| against the replay from the scenario's features:

    log(|err| + 0.01) = w · x,      band_90 = exp(w · x + r_90) - 0.01

where x is a one-hot encoding of the categorical features (topology, load band, topology x load
band, arrivals, lengths, perf, model family, KV, max batch, budget, dispatch, instances and the
disaggregated link class / sharing / transfer mode / first token / P-D GPUs) plus an intercept,
w is a ridge least-squares fit (lambda = 3, intercept unpenalised) on the *fit* part, and r_90 is
the split-conformal quantile of the residuals on a separate *calibration* part (the
ceil((n+1) 0.9)-th smallest of n): in-sample residuals of a 60-column fit are too small, a
held-out calibration set makes ~90% coverage hold for exchangeable new scenarios. The 0.01 floor
keeps the log finite for errors near zero. The baseline is the simplest band: the 90th percentile
of |err| in the scenario's (topology, load band) cell of the fit + calibration parts.

:func:`coverage` splits the rows by a seeded permutation (40% fit, 27% calibration, 33% held
out), and reports on the held-out part the fraction of errors inside their band and the median
band width, for both models; failed rows (no analytic answer) are left out. A held-out scenario
with a feature value the fit part never saw is "outside the envelope" and counted separately.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qmodel.validation.harness import LATENCY_METRICS

__all__ = ["BAND_FEATURES", "LEVEL", "fit_band_model", "predict_band", "coverage"]

BAND_FEATURES = ("topology", "band", "topology_band", "arrivals", "lengths", "perf", "model_family", "kv",
                 "max_batch", "budget", "dispatch", "instances", "link_class", "link_sharing", "transfer_mode",
                 "first_token_from", "pd_gpus")
LEVEL = 0.9
_FLOOR = 0.01
_RIDGE = 3.0


def _feats(row: dict) -> dict[str, str]:
    f = dict(row["features"])
    f["band"] = row["band"]
    f["topology_band"] = f"{row['topology']}/{row['band']}"
    return f


def _columns(rows: list[dict]) -> list[tuple[str, str]]:
    return sorted({(k, v) for r in rows for k, v in _feats(r).items() if k in BAND_FEATURES})


def _matrix(rows: list[dict], cols: list[tuple[str, str]]) -> np.ndarray:
    index = {c: i + 1 for i, c in enumerate(cols)}
    x = np.zeros((len(rows), len(cols) + 1))
    x[:, 0] = 1.0
    for i, r in enumerate(rows):
        for k, v in _feats(r).items():
            j = index.get((k, v))
            if j is not None:
                x[i, j] = 1.0
    return x


def _y(rows: list[dict], m: str) -> np.ndarray:
    return np.log(np.abs([r["error_rel"][m] for r in rows]) + _FLOOR)


def fit_band_model(fit: list[dict], calibration: list[dict]) -> dict[str, Any]:
    """Per metric: ridge weights (on ``fit``), the conformal offset r_90 (on ``calibration``) and
    the baseline cell quantiles (on both)."""
    fit = [r for r in fit if r.get("error_rel")]
    calibration = [r for r in calibration if r.get("error_rel")]
    if not fit or not calibration:
        raise ValueError("fit_band_model needs rows with an analytic answer in both parts")
    rows = fit + calibration
    cols = _columns(fit)
    x = _matrix(fit, cols)
    xc = _matrix(calibration, cols)
    pen = _RIDGE * np.eye(x.shape[1])
    pen[0, 0] = 0.0
    model: dict[str, Any] = {"columns": cols, "metrics": {}}
    k = min(len(calibration), int(np.ceil((len(calibration) + 1) * LEVEL)))
    for m in LATENCY_METRICS:
        w = np.linalg.solve(x.T @ x + pen, x.T @ _y(fit, m))
        resid = np.sort(_y(calibration, m) - xc @ w)
        cells: dict[str, list[float]] = {}
        for r in rows:
            cells.setdefault(f"{r['topology']}/{r['band']}", []).append(abs(r["error_rel"][m]))
        model["metrics"][m] = {"w": w, "r90": float(resid[k - 1]),
                               "cell_p90": {k: float(np.quantile(v, LEVEL)) for k, v in cells.items()},
                               "all_p90": float(np.quantile(np.abs([r["error_rel"][m] for r in rows]), LEVEL))}
    return model


def predict_band(model: dict[str, Any], row: dict, metric: str) -> tuple[float, bool]:
    """(the 90% band of |error| for ``metric``, whether ``row`` lies inside the fitted envelope)."""
    cols = model["columns"]
    known = {k for k, _ in cols}
    inside = all((k, v) in set(cols) for k, v in _feats(row).items() if k in known)
    p = model["metrics"][metric]
    x = _matrix([row], cols)[0]
    return float(np.exp(x @ p["w"] + p["r90"]) - _FLOOR), inside


def coverage(rows: list[dict], seed: int = 0) -> dict[str, Any]:
    """Fit and calibrate on seeded parts of ``rows``, report held-out coverage and band widths."""
    ok = [r for r in rows if r.get("error_rel")]
    perm = np.random.default_rng(seed).permutation(len(ok))
    a, b = int(round(0.4 * len(ok))), int(round(0.67 * len(ok)))
    fit, cal, test = ([ok[i] for i in perm[:a]], [ok[i] for i in perm[a:b]], [ok[i] for i in perm[b:]])
    model = fit_band_model(fit, cal)
    out: dict[str, Any] = {"fit": len(fit), "calibration": len(cal), "held_out": len(test), "level": LEVEL,
                           "seed": seed, "metrics": {}}
    for m in LATENCY_METRICS:
        p = model["metrics"][m]
        bands, inside, base = [], [], []
        for r in test:
            b, env = predict_band(model, r, m)
            bands.append(b)
            inside.append(env)
            base.append(p["cell_p90"].get(f"{r['topology']}/{r['band']}", p["all_p90"]))
        err = np.abs([r["error_rel"][m] for r in test])
        bands_a, base_a, env_a = np.asarray(bands), np.asarray(base), np.asarray(inside, dtype=bool)
        out["metrics"][m] = {
            "coverage": float(np.mean(err <= bands_a)), "median_band": float(np.median(bands_a)),
            "coverage_inside_envelope": float(np.mean(err[env_a] <= bands_a[env_a])) if env_a.any() else None,
            "outside_envelope": int((~env_a).sum()),
            "baseline_coverage": float(np.mean(err <= base_a)), "baseline_median_band": float(np.median(base_a))}
    return out
