"""What-if, not the product: the limits table with *stratified* lognormal/preset length samples
(normal quantiles (i + 0.5)/n in a seeded random order instead of i.i.d. draws), for the solver only
or for the solver and the replay's synthetic traces (docs/validation.md, "Sustained rate", prefill).

    .venv/bin/python benchmarks/stratified_lengths_whatif.py solver|both     # ~20 s

It swaps ``qmodel.workload.lognormal_pairs`` at run time to measure a proposed change without making
it; the product code is untouched.
"""
import math, sys, numpy as np
from scipy.special import ndtri
import qmodel.workload as qw
import qmodel.validation.synth as vs
from pathlib import Path
mode = sys.argv[1]  # "solver" | "both"
orig = qw.lognormal_pairs
def strat(n, seed, p_median, p_sigma, p_min, p_max, o_median, o_sigma, o_min, o_max, corr):
    rng = np.random.default_rng(seed)
    z1 = ndtri((rng.permutation(n) + 0.5) / n)
    e2 = ndtri((rng.permutation(n) + 0.5) / n)
    z2 = corr * z1 + math.sqrt(max(0.0, 1.0 - corr * corr)) * e2
    p = np.clip(np.rint(p_median * np.exp(p_sigma * z1)), max(1, p_min), p_max).astype(np.int64)
    o = np.clip(np.rint(o_median * np.exp(o_sigma * z2)), max(1, o_min), o_max).astype(np.int64)
    return p, o
qw.lognormal_pairs = strat
if mode == "both":
    vs.lognormal_pairs = strat
from qmodel.engine import Solver
from qmodel.scenario import load_scenario
from qmodel.validation.sustained import sustained_rate
EX = Path("examples")
cases = [(p, []) for p in sorted(EX.iterdir())]
cases += [(EX / "llama3-8b-chunked-h100.yaml", [f"deployment.chunk_tokens={b}"]) for b in (256, 1024, 2048, 4096, 8192, 16384)]
for p, over in cases:
    scn = load_scenario(p, over)
    lim, st = Solver(scn).max_stable_rate()
    sus = sustained_rate(scn, 20000, 0, guess_per_s=lim).rate_per_s
    print(f"{mode} {p.stem:30s} {' '.join(over):28s} {st:10s} {lim:9.4g} {sus:9.4g} {100*(lim/sus-1):+6.1f}%", flush=True)
