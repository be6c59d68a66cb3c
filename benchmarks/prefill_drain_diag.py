"""Saturated prefill drain: the model's (E[N], E[S_N]) against the replay's saturated batches
(docs/validation.md, "Sustained rate", prefill paragraph). Replays at 1.5x the analytic limit with the
scenario's own synthetic trace, then with the model's own length sample (bootstrap / cycled
permutations), which separates the drain law from the length sample.

    .venv/bin/python benchmarks/prefill_drain_diag.py examples/llama2-70b-disagg-splitwise.toml 20000
"""
import sys, numpy as np
from pathlib import Path
from qmodel.solver import Solver
from qmodel.scenario import load_scenario
from qmodel.validation.sustained import poisson_at
import qmodel.validation.stations.prefill as vp
from qmodel.validation.replay import replay_requests

path = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
scn = load_scenario(path)
s = Solver(scn)
st = s._prefill
law = st.law
en, es = law.mean_drain
print("analytic: c", st.instances, "E[N]", en, "E[S_N]", es, "lim", st.max_stable_rate_per_s())
p = np.asarray(st.prompt_tokens, float)
print("sample prompts: n", p.size, "mean", p.mean(), "max", p.max(), "frac>B", (p > st.max_batch_tokens).mean())
rec = []
orig = vp.PrefillStation._start
class Proxy:
    def __init__(self, m, log): self.m, self.log = m, log
    def prefill_time_s(self, s1, s2, k):
        d = self.m.prefill_time_s(s1, s2, k); self.log.append([s1, s2, k, float(d)]); return d
    def __getattr__(self, a): return getattr(self.m, a)
def start(self, i):
    if not isinstance(self.model, Proxy): self.model = Proxy(self.model, [])
    orig(self, i)
    self.model.log[-1].append(len(self.queues[i])); self.model.log[-1].append(self.sim.now)
    rec.append(self.model.log[-1])
vp.PrefillStation._start = start
lim = st.max_stable_rate_per_s()
res, req = replay_requests(poisson_at(scn, 1.5 * lim), n_requests=n, seed=0, warmup_fraction=0.1)
a = np.array(rec)
t = a[:, 5]
sel = (a[:, 4] > 20) & (t > t.max() * 0.1)
b = a[sel]
print("replay saturated batches", sel.sum(), "E[N]", b[:, 2].mean(), "E[S_N]", b[:, 3].mean(), "tokens/batch", b[:, 0].mean(),
      "rate c*E[N]/E[S]", st.instances * b[:, 2].mean() / b[:, 3].mean(), "throughput", res.throughput_rps)
print("replay P(N=k)", np.bincount(b[:, 2].astype(int))[1:12] / len(b))
print("model  P(N=k)", law.p_n[:11])
print("model E[S|N=k]", law.cut_law.mean_s[:6])
print("replay E[S|N=k]", [b[b[:, 2] == k, 3].mean() for k in range(1, 7)])
prm = np.asarray(req.prompt)
print("replay prompts mean", prm.mean(), "max", prm.max(), "frac>B", (prm > st.max_batch_tokens).mean())
# same lengths as the model: bootstrap pairs from the resolved sample
import dataclasses
from qmodel.validation.replay import load_replay_trace
r = s.resolved
sc = poisson_at(scn, 1.5 * lim)
tr = load_replay_trace(sc, n, 0)
rng = np.random.default_rng(5)
for kind in ("bootstrap", "cycled-permuted"):
    if kind == "bootstrap":
        ix = rng.integers(0, r.lengths.prompt.size, len(tr.prompt_tokens))
    else:
        ix = np.concatenate([rng.permutation(r.lengths.prompt.size) for _ in range(n // r.lengths.prompt.size + 1)])[:len(tr.prompt_tokens)]
    tr2 = dataclasses.replace(tr, prompt_tokens=np.asarray(r.lengths.prompt)[ix], output_tokens=np.asarray(r.lengths.output)[ix])
    rec.clear()
    res, req = replay_requests(sc, tr2, n_requests=n, seed=0, warmup_fraction=0.1)
    a = np.array(rec); t = a[:, 5]; b = a[(a[:, 4] > 20) & (t > t.max() * 0.1)]
    print(kind, "E[N]", b[:, 2].mean(), "E[S_N]", b[:, 3].mean(), "rate", st.instances * b[:, 2].mean() / b[:, 3].mean(), "throughput", res.throughput_rps, "analytic", lim)
