"""Measured step-time tables: the public names, gathered from the modules that implement them.

One job per module:

* :mod:`qmodel.perf.table_loaders`: the file formats (splitwise-sim CSV, DistServe profiler JSON,
  qmodel CSV), their readers, the catalog-name -> table-key maps and format detection;
* :mod:`qmodel.perf.table_sweep`: :class:`SweepTableModel`, interpolation on one-factor sweeps;
* :mod:`qmodel.perf.grid`: :class:`~qmodel.perf.grid.GridTableModel`, interpolation on full grids;
* :mod:`qmodel.perf.table_distserve`: :class:`DistServeModel`, DistServe's fitted formula;
* :mod:`qmodel.perf.table_interp`: the interpolation, median and plausibility helpers they share;
* :mod:`qmodel.perf.table_pipeline`: a table measured at pp = 1 run as a pp-stage pipeline, and
  the per-batch constant of ``perf: {kind: table}``.

Every name importable from here before the split still is (``from qmodel.perf.tables import ...``).
"""

from __future__ import annotations

from qmodel.perf.table_distserve import DistServeModel
from qmodel.perf.table_interp import (
    TablePoint,
    interp_piecewise,
    interp_piecewise_scalar,
    median_groups,
    medians_as_points,
)
from qmodel.perf.table_loaders import (
    DISTSERVE_HARDWARE,
    DISTSERVE_MODELS,
    SPLITWISE_HARDWARE,
    SPLITWISE_MODELS,
    detect_format,
    load_distserve,
    load_qmodel_csv,
    load_splitwise,
)
from qmodel.perf.table_sweep import SweepTableModel

__all__ = [
    "medians_as_points",
    "TablePoint",
    "SweepTableModel",
    "DistServeModel",
    "SPLITWISE_MODELS",
    "SPLITWISE_HARDWARE",
    "DISTSERVE_MODELS",
    "DISTSERVE_HARDWARE",
    "load_splitwise",
    "load_distserve",
    "load_qmodel_csv",
    "detect_format",
    "interp_piecewise",
    "interp_piecewise_scalar",
    "median_groups",
]
