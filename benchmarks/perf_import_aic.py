"""How closely an imported AIConfigurator table reproduces AIC's own static estimates off its grid nodes.

    .venv/bin/python benchmarks/perf_import_aic.py [--table T.csv] [--model-key K] [--system S] [--tp N]

Imports the table (or reads ``--table``), then asks AIC for static estimates at points that are
NOT grid nodes and compares:

* prefill: AIC ``static_ctx`` ttft at (batch, isl) vs the table's ``prefill_time_s``;
* decode: AIC ``static_gen`` tpot at (batch, isl, osl) -- the mean step over the ``osl - 1``
  decode steps, contexts isl .. isl + osl - 2 -- vs the mean of the table's decode step over the
  same contexts.

Prints each point and the max / mean absolute relative error per phase. Needs ``qmodel[aic]``.
"""

from __future__ import annotations

import argparse

import numpy as np

from qmodel.perf.importers.aic import aic_static_ms, import_aic
from qmodel.perf.tables import load_qmodel_csv

PREFILL_POINTS = [(1, 700), (1, 3000), (1, 12000), (3, 700), (3, 1500), (6, 3000), (5, 6000), (2, 10000)]
DECODE_POINTS = [(3, 600, 64), (12, 2000, 64), (48, 6000, 64), (100, 3000, 64), (24, 12000, 64), (200, 700, 64),
                 (1, 20000 - 64, 64), (7, 300, 256)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default=None)
    ap.add_argument("--model-key", default="meta-llama/Meta-Llama-3.1-8B")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--moe-ep", type=int, default=1)
    args = ap.parse_args()
    if args.table:
        model = load_qmodel_csv(args.table, tp=args.tp)
    else:
        model = import_aic(args.model_key, args.system, args.tp, backend=args.backend, moe_ep=args.moe_ep).to_model()
    kw = {"backend": args.backend, "moe_ep": args.moe_ep}
    errs: dict[str, list[float]] = {"prefill": [], "decode": []}
    print(f"{args.model_key} on {args.system} ({args.backend}), tp {args.tp}")
    for n, p in PREFILL_POINTS:
        aic, _ = aic_static_ms(args.model_key, args.system, args.tp, mode="static_ctx", batch_size=n, isl=p, osl=1, **kw)
        ours = 1000.0 * float(model.prefill_time_s(float(n * p), float(n * p * p), float(n)))
        errs["prefill"].append(ours / aic - 1.0)
        print(f"prefill batch {n:4d} isl {p:6d}: aic {aic:9.3f} ms  table {ours:9.3f} ms  {100 * (ours / aic - 1):+6.2f}%")
    for n, isl, osl in DECODE_POINTS:
        aic, _ = aic_static_ms(args.model_key, args.system, args.tp, mode="static_gen", batch_size=n, isl=isl, osl=osl,
                               **kw)
        ctx = np.arange(isl, isl + osl - 1, dtype=float)
        ours = 1000.0 * float(np.mean(model.decode_step_time_s(np.full_like(ctx, n), n * ctx)))
        errs["decode"].append(ours / aic - 1.0)
        print(f"decode  batch {n:4d} isl {isl:6d} osl {osl:4d}: aic tpot {aic:8.4f} ms  table {ours:8.4f} ms  "
              f"{100 * (ours / aic - 1):+6.2f}%")
    for ph, e in errs.items():
        a = np.abs(e)
        print(f"{ph}: max |err| {100 * a.max():.2f}%, mean |err| {100 * a.mean():.2f}% over {len(e)} off-grid points")


if __name__ == "__main__":
    main()
