"""Fit the roofline's efficiency factors to a measured table (least squares on relative error).

Fitted parameters (bounds): ``mfu`` (0.02-1), ``mbu`` (0.02-1), ``prefill_overhead_s`` and
``decode_overhead_s`` (0-1 s), ``attention_efficiency`` (0.02-1), ``prefill_per_request_s`` (0-1 s). ``comm_efficiency`` stays at its
default: with tp fixed in a table its effect is indistinguishable from mfu/mbu and the overheads.

Objective: the residual of each measured median is ``predicted / measured - 1``; each phase's
residuals are scaled by ``1/sqrt(points in the phase)`` so prefill and decode weigh equally however
many points each has. Relative error because the times span two orders of magnitude (60 ms to
11 s) and a planner cares about percent error, not absolute seconds. The roofline is piecewise
smooth (a max of two terms), so the fit runs scipy's trust-region least squares from several
starting points and keeps the best.

The fit runs on top of the default roofline, the shared efficiency curves of the GPU's
architecture (qmodel.perf.efficiency): each fitted factor is an explicit override of the curve's
number (``mfu`` replaces the saturated GEMM efficiency, ``mbu`` the HBM efficiencies, an overhead
the per-step constant; ``attention_efficiency`` scales the curve's attention peak), so the printed
``perf:`` block with ``efficiency: curves`` reproduces the fitted times. The fit starts from the
curve's own numbers (``start`` reports them).

Reported: MAPE (mean absolute percentage error, as a fraction) per phase before (the defaults
passed in) and after the fit, the starting and fitted parameters, and the table's SHA-256.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qmodel.errors import InputError, NumericalError
from qmodel.perf.importers import ImportedTable
from qmodel.perf.parallel import check_parallelism
from qmodel.perf.roofline import RooflineModel
from qmodel.perf.tables import TablePoint
from qmodel.specs import GPUSpec, ModelSpec

__all__ = ["FIT_PARAMS", "calibrate_roofline", "calibrate_table", "calibrate_imported", "mape_by_phase"]

#: name -> (lower bound, upper bound) of every fitted factor
FIT_PARAMS: dict[str, tuple[float, float]] = {
    "mfu": (0.02, 1.0),
    "mbu": (0.02, 1.0),
    "prefill_overhead_s": (0.0, 1.0),
    "decode_overhead_s": (0.0, 1.0),
    "attention_efficiency": (0.02, 1.0),
    "prefill_per_request_s": (0.0, 1.0),
}


def _predict(model: RooflineModel, points: list[TablePoint]) -> np.ndarray:
    out = np.empty(len(points))
    pre = [i for i, p in enumerate(points) if p.phase == "prefill"]
    dec = [i for i, p in enumerate(points) if p.phase == "decode"]
    if pre:
        out[pre] = model.prefill_time_s(np.array([points[i].sum_tokens for i in pre]),
                                        np.array([points[i].sum_sq_tokens for i in pre]),
                                        np.array([points[i].n for i in pre]))
    if dec:
        out[dec] = model.decode_step_time_s(np.array([points[i].n for i in dec]),
                                            np.array([points[i].sum_context_tokens for i in dec]))
    return out


def mape_by_phase(model: RooflineModel, points: list[TablePoint]) -> dict[str, float]:
    """Mean |predicted/measured - 1| per phase (fractions)."""
    pred = _predict(model, points)
    meas = np.array([p.time_s for p in points])
    err = np.abs(pred / meas - 1.0)
    out = {}
    for phase in ("prefill", "decode"):
        mask = np.array([p.phase == phase for p in points])
        if mask.any():
            out[phase] = float(err[mask].mean())
    return out


def calibrate_roofline(points: list[TablePoint], model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1,
                       start: dict[str, float] | None = None, table_sha256: str = "",
                       fit: tuple[str, ...] = tuple(FIT_PARAMS)) -> dict[str, Any]:
    """Fit the factors in ``fit`` to ``points``; returns the report dict described in the module docstring."""
    from scipy.optimize import least_squares  # heavy import: only when calibrating

    if not points:
        raise InputError("table", "(empty)", "a table with measured prefill and decode points")
    unknown = [f for f in fit if f not in FIT_PARAMS]
    if unknown:
        raise InputError("fit", unknown, f"names from {', '.join(FIT_PARAMS)}")
    base = dict(start or {})
    before = RooflineModel(model, gpu, tp, pp, **base)
    meas = np.array([p.time_s for p in points])
    phases = np.array([p.phase for p in points])
    weight = np.ones(len(points))
    for ph in ("prefill", "decode"):
        k = int((phases == ph).sum())
        if k:
            weight[phases == ph] = 1.0 / np.sqrt(k)

    lo = np.array([FIT_PARAMS[f][0] for f in fit])
    hi = np.array([FIT_PARAMS[f][1] for f in fit])

    def make(x: np.ndarray) -> RooflineModel:
        return RooflineModel(model, gpu, tp, pp, **{**base, **dict(zip(fit, (float(v) for v in x)))})

    def resid(x: np.ndarray) -> np.ndarray:
        return weight * (_predict(make(x), points) / meas - 1.0)

    defaults = before.params()
    x_default = np.clip([float(defaults[f]) for f in fit], lo, hi)
    start_params = {f: float(defaults[f]) for f in fit}
    starts = [x_default]
    # A spread of starts: the max() in the roofline gives each start its own active branch.
    for mfu, mbu, ovh, att in ((0.3, 0.3, 0.02, 0.5), (0.6, 0.8, 0.005, 1.0), (0.15, 0.15, 0.04, 0.2)):
        guess = {"mfu": mfu, "mbu": mbu, "prefill_overhead_s": ovh, "decode_overhead_s": ovh,
                 "attention_efficiency": att, "prefill_per_request_s": ovh}
        starts.append(np.clip([guess[f] for f in fit], lo, hi))
    best = None
    for x0 in starts:
        sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=2000)
        if best is None or sol.cost < best.cost:
            best = sol
    if best is None or not np.all(np.isfinite(best.x)):
        raise NumericalError("calibration did not converge to finite parameters")
    # Snap values that sit on a bound up to solver round-off (1e-20 s overheads) to the bound itself.
    x = np.where(np.isclose(best.x, lo, rtol=0, atol=1e-12), lo, best.x)
    x = np.where(np.isclose(x, hi, rtol=0, atol=1e-12), hi, x)
    after = make(x)
    params = {f: float(v) for f, v in zip(fit, x)}
    return {
        "model": model.name, "gpu": gpu.name, "tp": tp, "pp": pp,
        "points": {ph: int((phases == ph).sum()) for ph in ("prefill", "decode")},
        "mape_before": mape_by_phase(before, points),
        "mape_after": mape_by_phase(after, points),
        "efficiency": "curves" if before.curves is not None else "constants",
        "start": start_params,
        "params": params,
        "table_sha256": table_sha256,
    }


def calibrate_table(path: str, model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1, *, fmt: str = "auto",
                    model_key: str | None = None, hardware_key: str | None = None,
                    start: dict[str, float] | None = None, field_prefix: str = "calibrate") -> dict[str, Any]:
    """Load a measured table for (model, gpu, tp) and fit the roofline to its points."""
    from qmodel.perf.service_time import table_model

    check_parallelism(model, tp, pp, field_prefix)
    table = table_model(path, model, gpu, tp, pp, fmt=fmt, model_key=model_key, hardware_key=hardware_key,
                        field_prefix=field_prefix)
    points = table.points()  # type: ignore[attr-defined]  # every table model provides its points
    report = calibrate_roofline(points, model, gpu, tp, pp, start=start, table_sha256=table.fingerprint)
    report["table"] = table.describe()
    return report


def calibrate_imported(table: ImportedTable, model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1,
                       start: dict[str, float] | None = None, field_prefix: str = "calibrate") -> dict[str, Any]:
    """Fit the roofline to an imported source's table (``qmodel perf import``); same report as :func:`calibrate_table`.

    The points are the table's rows (grid nodes or sweep medians) as the written file would give
    them, and ``table_sha256`` is the SHA-256 that file would have.
    """
    check_parallelism(model, tp, pp, field_prefix)
    if table.tp != tp:
        raise InputError(f"{field_prefix}.tp", tp, f"the imported table measures tp {table.tp}")
    tm = table.to_model()
    report = calibrate_roofline(tm.points(), model, gpu, tp, pp, start=start,  # type: ignore[attr-defined]
                                table_sha256=tm.fingerprint)
    report["table"] = tm.describe()
    return report
