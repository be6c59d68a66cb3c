"""``qmodel calibrate``: fit the roofline's efficiency factors to a measured step-time table.

    qmodel calibrate TABLE --model M --gpu G --tp N [--pp 1] [--format auto] [--model-key K]
                     [--hardware-key H] [--json]
    qmodel calibrate [PATH ...] --source {aic,vidur,splitwise,distserve,vllm-bench} --model M --gpu G --tp N
                     [the source options of 'qmodel perf import'] [--json]

TABLE is a splitwise-sim ``perf_model.csv``, a DistServe profiler JSON or a qmodel CSV (``data:``
paths resolve under the data folder). With ``--source`` the points are those of the table
``qmodel perf import SOURCE`` would write (same arguments). JSON output::

    {"mape_before": {"prefill": .., "decode": ..}, "mape_after": {...}, "params": {...},
     "table_sha256": "...", ...}

MAPEs are fractions. The text output ends with the ``perf:`` block to paste into a scenario.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qmodel.cli.cmd_perf import add_source_args, import_from_args
from qmodel.cli.output import add_width_option, print_json, print_table
from qmodel.errors import InputError
from qmodel.perf.importers import SOURCES

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="fit roofline factors (mfu, mbu, overheads) to a measured table",
                       description="Least-squares fit of the roofline's efficiency factors to a measured "
                                   "step-time table, on relative error; reports MAPE before and after.")
    p.add_argument("paths", metavar="TABLE", nargs="*",
                   help="splitwise-sim CSV, DistServe profiler JSON or qmodel CSV; with --source, the source's PATHs")
    p.add_argument("--source", default="table", choices=["table", *SOURCES],
                   help="fit to a measured source as 'qmodel perf import SOURCE' reads it (default: a table file)")
    p.add_argument("--model", required=True, help="catalog model name, e.g. llama-2-70b")
    p.add_argument("--gpu", required=True, help="catalog GPU name, e.g. a100-80gb-sxm")
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel degree of the measured instance")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (tables measure 1)")
    p.add_argument("--format", default="auto", choices=["auto", "splitwise", "distserve", "qmodel"])
    add_width_option(p)
    p.add_argument("--model-key", default=None, help="the model's name inside the table, if not the catalog mapping")
    p.add_argument("--hardware-key", default=None, help="the hardware name inside the table (e.g. h100-80gb-pcap)")
    add_source_args(p, with_source=False, with_keys=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from qmodel.perf.calibrate import calibrate_imported, calibrate_table
    from qmodel.registry import get_gpu, get_model

    model, gpu = get_model(args.model), get_gpu(args.gpu)
    if args.source == "table":
        if len(args.paths) != 1:
            raise InputError("TABLE", args.paths, "exactly one table file (or --source SOURCE with its PATHs)")
        report = calibrate_table(args.paths[0], model, gpu, args.tp, args.pp, fmt=args.format,
                                 model_key=args.model_key, hardware_key=args.hardware_key)
    else:
        report = calibrate_imported(import_from_args(args), model, gpu, args.tp, args.pp)
    if args.json:
        print_json(report)
        return 0
    out = sys.stdout
    out.write(f"{model.name} on {gpu.name}, tp={args.tp} pp={args.pp}; table sha256 {report['table_sha256'][:16]}..."
              f" ({report['points']['prefill']} prefill, {report['points']['decode']} decode points)\n\n")
    rows = [[ph, f"{100 * report['mape_before'].get(ph, 0.0):.1f}%", f"{100 * report['mape_after'].get(ph, 0.0):.1f}%"]
            for ph in ("prefill", "decode")]
    print_table(["phase", "MAPE default", "MAPE calibrated"], rows, out)
    out.write(f"\nperf:\n  kind: roofline\n  efficiency: {report.get('efficiency', 'curves')}\n")
    for k, v in report["params"].items():
        out.write(f"  {k}: {v:.4g}\n")
    return 0
