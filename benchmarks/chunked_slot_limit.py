"""Chunked stability limit where the slot cap binds: analytic limit vs the replay's sustained rate
(docs/validation.md, "Chunked limit with a binding slot cap (issue 18, corpus-ci c0028)").

    .venv/bin/python benchmarks/chunked_slot_limit.py [n_requests]    # default 20000, ~1 min

Cases: corpus-ci c0028 (data-free: ``generate(36, 18, data=False)``) and, with the data folder,
the chunked rows of the 600-case corpus (seed 0) whose replay did not keep up at a rate the
analytic engine calls stable (c0202, c0221, c0341, c0421). For each: the analytic limit, the
sustained rate at seeds 0-3 and the error of the limit against the lowest of them. For the
fixed-length cases also the saturated throughput of the phase-locked schedules: with identical
lengths every request holds its slot for exactly L iterations (one prefill iteration, L - 1
decode ones), so under an endless backlog the slots fall into groups admitted together that
never merge; a group partition (k_1, ..., k_g) of the m slots gives, per instance,

    m / ( sum_j T_mix(k_j prompts, m - k_j decodes) + (L - g) t_d(m) ).

The analytic limit is now the saturated schedule (qmodel/stations/chunked_capacity.py), which
starts staggered and so gives the fully staggered g = m value for fixed lengths.
"""

from __future__ import annotations

import sys

import numpy as np

from qmodel.settings import data_dir
from qmodel.solver import Solver
from qmodel.validation.corpus import generate
from qmodel.validation.sustained import sustained_rate

SEEDS = (0, 1, 2, 3)


def partitions(m: int, most: int | None = None) -> list[tuple[int, ...]]:
    """The partitions of m, parts in non-increasing order."""
    most = m if most is None else most
    if m == 0:
        return [()]
    return [(k,) + rest for k in range(min(m, most), 0, -1) for rest in partitions(m - k, k)]


def phase_locked(solver: Solver) -> list[tuple[tuple[int, ...], float]]:
    """(group sizes, pool throughput) of each phase-locked saturated schedule (module doc);
    fixed lengths, one prefill iteration per prompt, m <= L only."""
    st = solver.pool_station
    sv, m = st.service, int(st.cap)
    p, n_out = float(st.p[0]), float(st.L[0])
    ctx = p + n_out / 2.0  # mean context over a decode life

    def t_dec(n: int) -> float:
        return float(sv.decode_step_time_s(float(n), n * ctx))

    def t_mix(k: int, n: int) -> float:
        t = float(sv.prefill_time_s(k * p + n, k * p * p, float(k)))
        return t + (t_dec(n) - float(sv.decode_step_time_s(float(n), 0.0)) if n else 0.0)

    out = []
    for parts in partitions(m):
        cycle = sum(t_mix(k, m - k) for k in parts) + (n_out - len(parts)) * t_dec(m)
        out.append((parts, st.instances * m / cycle))
    return out


def report(case_id: str, solver: Solver, n: int) -> None:
    lim, _ = solver.max_stable_rate()
    sus = [sustained_rate(solver.scenario, n, s, guess_per_s=lim).rate_per_s for s in SEEDS]
    st = solver.pool_station
    print(f"{case_id}: slot cap {st.cap}, budget {st.chunk_tokens}, E[P] {st.mean_p:.0f}, E[L] {st.mean_output:.0f}, "
          f"{st.instances} instances; analytic {lim:.4g}, sustained seeds {SEEDS}: "
          f"{', '.join(f'{x:.4g}' for x in sus)}; error vs the lowest {100 * (lim / min(sus) - 1):+.1f}%", flush=True)
    fixed = np.ptp(st.p) == 0 and np.ptp(st.L) == 0
    if fixed and st.cap <= st.L[0] and st.p[0] + st.cap <= st.chunk_tokens:
        by_g: dict[int, list[float]] = {}
        for parts, x in phase_locked(solver):
            by_g.setdefault(len(parts), []).append(x)
        print("   phase-locked schedules by number of slot groups g: " +
              ", ".join(f"g={g} {min(v):.4g}" + (f"-{max(v):.4g}" if max(v) - min(v) > 5e-4 * max(v) else "")
                        for g, v in sorted(by_g.items())))


def main(n: int = 20000) -> None:
    ci = {c.id: c for c in generate(36, 18, data=False).cases}
    report("corpus-ci c0028", Solver(ci["c0028"].scenario), n)
    if data_dir() is None:
        print("data folder absent: the 600-case corpus rows are skipped")
        return
    corpus = {c.id: c for c in generate(600, 0).cases}
    for cid in ("c0202", "c0221", "c0341", "c0421"):
        report(f"corpus {cid}", Solver(corpus[cid].scenario), n)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
