"""least_loaded disaggregated prefill pools: analytic TTFT p50/p90/p99 vs the replay (issue 18 item 3).

    .venv/bin/python benchmarks/disagg_least_loaded.py suite OUT.json [BASE.json]    # suite configs + BLOOM
    .venv/bin/python benchmarks/disagg_least_loaded.py corpus N SEED OUT.json [BASE.json]

``suite``: the validation suite's two disaggregated configs with ``prefill.dispatch = least_loaded``
(their default is round_robin), Poisson and Gamma cv 2, and issue 18's BLOOM-176B example (H100
TP8, the splitwise-sim measured table, prefill budget 2,048, Azure conv preset; needs the data
folder), Poisson: 2 prefill + 2 decode at 2-10 req/s (the decode pool sets its limit) and 2 + 4
(the prefill pool sets it); at 0.5-0.95 of the analytic limit, 2 replay seeds. ``corpus``: every
disaggregated least_loaded case with more than one prefill instance among N generated scenarios of
SEED (data-free: QMODEL_DATA_DIR an empty folder), at the corpus-ci replay lengths. BASE.json (an
earlier OUT) lends its replays where the rate is unchanged, so an analytic change is re-scored
without replaying. Prints relative errors (fractions). Measured figures: docs/validation.md,
"least_loaded pools: the pooled bulk chain".
"""
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.engine import Solver  # noqa: E402
from qmodel.scenario import parse_scenario  # noqa: E402
from qmodel.validation.harness import compare_scenario  # noqa: E402
from qmodel.validation.suites import ARRIVALS, CONFIGS, length_source  # noqa: E402

KEYS = ("ttft_p50", "ttft_p90", "ttft_p99")
LOADS = (0.5, 0.7, 0.8, 0.9, 0.95)

BLOOM = {"name": "bloom-disagg-h100-ll", "model": "bloom-176b",
         "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 4.0},
                      "lengths": {"kind": "preset", "name": "azure-conv-2023"}},
         "slo": {"ttft_s": "2 s", "tpot_s": "100 ms"},
         "deployment": {"topology": "disaggregated", "link": "ib-ndr-400", "link_sharing": "fcfs",
                        "transfer_mode": "layerwise",
                        "prefill": {"gpu": "h100-sxm", "tp": 8, "instances": 2, "max_batch_tokens": 2048,
                                    "dispatch": "least_loaded"},
                        "decode": {"gpu": "h100-sxm", "tp": 8, "instances": 2}},
         "perf": {"kind": "table", "path": "data:splitwise_sim/perf_model.csv", "format": "splitwise"}}


def _row(key: str, rec: dict) -> str:
    err = rec.get("error_rel") or {}
    return f"{key:<44} " + " ".join(f"{k} {err[k]:+.3f}" for k in KEYS if k in err) + " " + rec.get("error", "")


def _base(argv: list[str], i: int) -> dict:
    return json.load(open(argv[i])) if len(argv) > i else {}


def suite(out: str, base: dict) -> None:
    scs = []
    for name, arr in ((n, a) for a in ("poisson", "gamma-cv2") for n in ("disagg-llama70b-h100", "disagg-qwen7b-a100")):
        cfg = CONFIGS[name]
        dep = dict(cfg.deployment, prefill=dict(cfg.deployment["prefill"], dispatch="least_loaded"))
        name = name if arr == "poisson" else f"{name} {arr}"
        scs.append((name, parse_scenario({"name": name, "model": cfg.model, "slo": cfg.slo, "perf": cfg.perf,
                                          "workload": {"arrivals": dict(ARRIVALS[arr], rate_per_s=1.0),
                                                       "lengths": length_source(cfg.mix, False)},
                                          "deployment": dep}, source=name)))
    if os.environ.get("QMODEL_DATA_DIR") and pathlib.Path(os.environ["QMODEL_DATA_DIR"], "splitwise_sim").is_dir():
        scs.append(("bloom-176b-h100", parse_scenario(BLOOM, source="issue 18 BLOOM example")))
        dep4 = dict(BLOOM["deployment"], decode=dict(BLOOM["deployment"]["decode"], instances=4))
        dec4 = dict(BLOOM, deployment=dep4)
        scs.append(("bloom-176b-h100-4dec", parse_scenario(dec4, source="issue 18 BLOOM example, 4 decode")))
    res = {}
    for name, sc in scs:
        loads: tuple[float, ...] = LOADS
        if name == "bloom-176b-h100":  # the issue's 2-12 req/s (the decode pool sets the limit, 10.7 req/s)
            lim = Solver(sc).max_stable_rate()[0]
            loads = tuple(r / lim for r in (2.0, 4.0, 6.0, 8.0, 10.0) if r < lim)
        for u in loads:
            key = f"{name} u{u:.2f}"
            n = int(min(max(1000 / (1 - u) ** 2, 4000), 20000))
            res[key] = compare_scenario(sc, u, n, (0, 1), reuse=base.get(key))
            rho = res[key].get("replay_station_utilization", {}).get("prefill", 0.0)
            print(_row(key, res[key]), f"rho_prefill {rho:.3f}", flush=True)
    json.dump(res, open(out, "w"))


def corpus(n: int, seed: int, out: str, base: dict) -> None:
    from qmodel.validation.corpus import generate
    from qmodel.validation.corpus_run import RUN_LENGTHS, run_corpus_case

    cases = [c for c in generate(n, seed, data=False).cases if c.features["topology"] == "disaggregated"
             and c.features["dispatch"] == "least_loaded" and c.features["instances"] != "1"]
    print(len(cases), "disaggregated least_loaded cases with > 1 prefill instance", flush=True)
    res = {}
    for c in cases:
        res[c.id] = run_corpus_case(c, RUN_LENGTHS["ci"], reuse=base.get(c.id))
        f = c.features
        print(_row(f"{c.id} u{c.utilization:.3f} {f['arrivals']} {f['lengths']} x{f['instances']}", res[c.id]),
              f["model"], f["gpu"], flush=True)
    json.dump(res, open(out, "w"))


if __name__ == "__main__":
    a = sys.argv
    if len(a) >= 3 and a[1] == "suite":
        suite(a[2], _base(a, 3))
    elif len(a) >= 5 and a[1] == "corpus":
        corpus(int(a[2]), int(a[3]), a[4], _base(a, 5))
    else:
        print("usage: disagg_least_loaded.py suite OUT [BASE] | corpus N SEED OUT [BASE]", file=sys.stderr)
        sys.exit(2)
