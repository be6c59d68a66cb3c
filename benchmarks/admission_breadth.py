"""KV admission breadth: analytic vs replay colocated/chunked TTFT over KV-capped OPT-13B set-ups
(issue 15 item 8 and variants: kv_memory_fraction, length cut-off, instances) at 0.7/0.85/0.92 of
the analytic limit (2 replay seeds) and over the single-pool examples and suite configs at 0.5/0.8
(1 seed); 20,000 requests each (seconds per case).

    .venv/bin/python benchmarks/admission_breadth.py {kv|ex|all} [OUT.json]

Replays and the limits that set the rates are cached in $TMPDIR/qmodel-admission/ (the replay does
not depend on the analytic engine, so a before/after comparison replays once). Needs the data
folder (ShareGPT lengths).
"""
import csv, json, os, sys, pathlib, tempfile
import numpy as np
from qmodel.solver import Solver
from qmodel.scenario import load_scenario, parse_scenario
from qmodel.validation.replay import replay
from qmodel.validation.harness import latency_metrics
from qmodel.validation.suites import CONFIGS
REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from qmodel.settings import data_dir  # noqa: E402
TMP = pathlib.Path(tempfile.gettempdir()) / 'qmodel-admission'
TMP.mkdir(exist_ok=True)
CACHE = TMP / 'replay_cache.json'
cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
rows = list(csv.DictReader(open(data_dir() / "length_distributions" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")))
def lengths(maxtot, name):
    out = TMP / f"{name}.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f); w.writerow(["num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio"])
        for r in rows:
            p, l = int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])
            if p + l < maxtot: w.writerow([p, l, p + l, p / l])
    return out
def opt(kvf, maxtot, topo="colocated", inst=2, mb=4096):
    out = lengths(maxtot, f"len{maxtot}")
    y = TMP / f"opt_{kvf}_{maxtot}_{topo}.yaml"
    extra = "  max_batch_tokens: %d\n" % mb if topo == "colocated" else "  chunk_tokens: %d\n" % mb
    y.write_text(f"""
name: adm-opt13b-{kvf}-{maxtot}-{topo}
model: opt-13b
workload:
  arrivals: {{kind: poisson, rate_per_s: 1.0}}
  lengths: {{kind: empirical, path: {out}, format: sharegpt}}
slo: {{ttft_s: "400 ms", tpot_s: "40 ms", attainment_goal: 0.9}}
deployment:
  topology: {topo}
  pool: {{gpu: a100-80gb-sxm, tp: 2, instances: {inst}, kv_memory_fraction: {kvf}, max_batch: 256}}
{extra}perf: {{kind: table, path: "{REPO}/catalog/tables/distserve/profiler-a100-80g.vllm.json", format: distserve}}
""")
    return load_scenario(str(y))
def kvset():
    return [("i8 kv.307 <2048", opt(0.307, 2048), (0.7, 0.85, 0.92), (0, 1)),
            ("kv.20 <2048", opt(0.20, 2048), (0.7, 0.85, 0.92), (0, 1)),
            ("kv.15 <1024", opt(0.15, 1024), (0.7, 0.85, 0.92), (0, 1)),
            ("kv.307 <2048 1inst", opt(0.307, 2048, inst=1), (0.7, 0.85, 0.92), (0, 1)),
            ("chunked kv.307 <2048", opt(0.307, 2048, topo="chunked", mb=2048), (0.7, 0.85, 0.92), (0, 1)),
            ("chunked kv.20 <2048 1inst", opt(0.20, 2048, topo="chunked", inst=1, mb=2048), (0.7, 0.85, 0.92), (0, 1))]
def exset():
    out = []
    for ex in ("llama3-8b-chunked-h100.yaml", "llama3-8b-colocated-h100.yaml", "opt13b-colocated-a100.yaml"):
        out.append((ex, load_scenario(str(REPO / "examples" / ex)), (0.5, 0.8), (0,)))
    for c in CONFIGS.values():
        if c.topology != "disaggregated":
            out.append((c.name, c.scenario("poisson", 1.0, empirical=False), (0.5, 0.8), (0,)))
    return out
which = sys.argv[1] if len(sys.argv) > 1 else "kv"
cases = kvset() if which == "kv" else exset() if which == "ex" else kvset() + exset()
res = []
LIM = json.loads((TMP / 'limits.json').read_text()) if (TMP / 'limits.json').exists() else {}
for name, sc, loads, seeds in cases:
    solver = Solver(sc)
    lim = LIM.setdefault(name, solver.max_stable_rate()[0])
    for f in loads:
        r = f * lim
        s = sc.with_rate(r)
        key = f"{name}|{f}"
        if key not in cache:
            cache[key] = [latency_metrics(replay(s, n_requests=20000, seed=sd)) for sd in seeds]
            CACHE.write_text(json.dumps(cache))
        reps = cache[key]
        try:
            a = Solver(s).solve()
            am = {"ttft_mean": a.ttft.mean, "ttft_p50": a.ttft.p50, "ttft_p90": a.ttft.p90, "ttft_p99": a.ttft.p99}
        except Exception as e:
            print(name, f, "ERR", e); continue
        row = [name, f]
        for k in ("ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99"):
            rv = np.mean([x[k] for x in reps]); rng = (min(x[k] for x in reps), max(x[k] for x in reps))
            row.append((am[k], rv, (am[k]-rv)/rv, rng))
        res.append(row)
(TMP / 'limits.json').write_text(json.dumps(LIM))
errs = {k: [] for k in range(4)}
for row in res:
    print(f"{row[0]:28s} {row[1]:.2f} " + " ".join(f"{a:.3f}/{r:.3f}({e:+.0%})" for a, r, e, _ in row[2:]))
    for k in range(4): errs[k].append(abs(row[2+k][2]))
print("mean |err| mean/p50/p90/p99:", " ".join(f"{np.mean(v):.1%}" for v in errs.values()))
out = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None
if out: out.write_text(json.dumps([[r[0], r[1]] + [list(x[:3]) for x in r[2:]] for r in res]))
