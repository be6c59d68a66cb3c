"""Speed of the C1 stations (pytest-benchmark, or run as a script for a plain table).

    .venv/bin/python -m pytest benchmarks/bench_stations.py --benchmark-enable -q
    .venv/bin/python benchmarks/bench_stations.py

Typical sizes: 4096-prompt lognormal mix (median 1000 tokens, sigma 0.8), token budget 8192
(token-aware FCFS-prefix batches, up to ~18 requests, 5 head regimes; ``prefill_solve_cap`` is the
plain cap b = 8), 4 instances, 80% load; a goodput bisection calls ``solve`` about 15 times.
"""

from __future__ import annotations


import numpy as np

from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.fcfs import MDc, MGc, ServiceSample
from qmodel.stations.kv_transfer import KVTransferStation
from qmodel.stations.prefill import PrefillStation


class _Linear(ServiceTimeModel):
    kind = "bench-linear"

    def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_requests):
        return 0.02 + 1e-4 * np.asarray(sum_tokens, float)

    def decode_step_time_s(self, n_seqs, sum_context_tokens):
        return 0.01 + 0.0 * np.asarray(n_seqs, float)

    @property
    def fingerprint(self) -> str:
        return "bench"


def _prompts() -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.clip(np.rint(1000 * np.exp(-0.32 + 0.8 * rng.standard_normal(4096))), 1, 8192)


def _station(b_tokens: int = 8192) -> PrefillStation:
    return PrefillStation(4, _Linear(), _prompts(), max_batch_tokens=b_tokens)


def case_prefill_solve() -> object:
    st = _station()
    st.law  # the batch-time law is rate-independent and built once per station
    lam = 0.8 * st.max_stable_rate_per_s()
    return lambda: st.solve(lam)


def case_prefill_solve_cap() -> object:
    # a plain request cap of 8 (no token budget): the single-regime chain
    st = PrefillStation(4, _Linear(), _prompts(), max_batch_tokens=None, max_batch_size=8)
    st.law
    lam = 0.8 * st.max_stable_rate_per_s()
    return lambda: st.solve(lam)


def case_prefill_mean_only() -> object:
    st = _station()
    st.law
    lam = 0.8 * st.max_stable_rate_per_s()
    return lambda: st.queue(lam).mean_wait_s


def case_prefill_law() -> object:
    return lambda: _station().law


def case_mdc() -> object:
    return lambda: MDc(9.0, 1.0, 10).quantile(0.99)


def case_mgc() -> object:
    s = ServiceSample.of(0.02 + 1e-4 * _prompts())
    return lambda: MGc(0.8 * 4 / s.mean_s, s, 4).quantile(0.99)


def case_kv_fcfs() -> object:
    st = KVTransferStation(np.linspace(0.5, 1.5, 4096) * 1e9, 10e9, paths=4, sharing="fcfs")
    return lambda: st.solve(0.8 * st.max_stable_rate_per_s())


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def test_bench_prefill_solve(benchmark) -> None:
    benchmark(case_prefill_solve())


def test_bench_prefill_solve_cap(benchmark) -> None:
    benchmark(case_prefill_solve_cap())


def test_bench_prefill_mean_only(benchmark) -> None:
    benchmark(case_prefill_mean_only())


def test_bench_prefill_law(benchmark) -> None:
    benchmark(case_prefill_law())


def test_bench_mdc(benchmark) -> None:
    benchmark(case_mdc())


def test_bench_mgc(benchmark) -> None:
    benchmark(case_mgc())


def test_bench_kv_fcfs(benchmark) -> None:
    benchmark(case_kv_fcfs())


if __name__ == "__main__":
    from _timing import print_table  # beside this script (sys.path[0] when run as one)

    print_table(CASES, width=22)
