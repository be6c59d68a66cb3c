"""Speed of the C2 stations: decode (GPS chain), colocated and chunked (pytest-benchmark, or a script).

    .venv/bin/python -m pytest benchmarks/bench_decode.py --benchmark-enable -q
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decode.py   (wall and CPU ms per call)

Typical sizes: 4096-request mix (prompts lognormal, mean 1000 tokens, sigma 0.8; outputs geometric,
mean 200), decode 10 ms + 0.1 ms/seq + 1e-7 s per context token, prefill 20 ms + 0.1 ms/token
(+ 2e-8 s/token^2 attention for chunked), 80% of each station's limit. A goodput bisection calls
``solve`` about 15 times; ``*_build`` is the per-scenario constructor cost.
"""

from __future__ import annotations


import numpy as np

from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.chunked import ChunkedStation
from qmodel.stations.colocated import ColocatedStation
from qmodel.stations.decode import DecodeStation


class _Linear(ServiceTimeModel):
    kind = "bench-linear"

    def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_requests):
        return 0.02 + 1e-4 * np.asarray(sum_tokens, float) + 2e-8 * np.asarray(sum_sq_tokens, float)

    def decode_step_time_s(self, n_seqs, sum_context_tokens):
        return 0.01 + 1e-4 * np.asarray(n_seqs, float) + 1e-7 * np.asarray(sum_context_tokens, float)

    @property
    def fingerprint(self) -> str:
        return "bench-c2"


def _mix() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    p = np.clip(np.rint(1000 * np.exp(-0.32 + 0.8 * rng.standard_normal(4096))), 1, 8192)
    return p, rng.geometric(1 / 200, 4096).astype(float)


def _solve_at(st, frac: float = 0.8):
    lam = frac * st.max_stable_rate_per_s()
    st.solve(lam)  # warm lazy caches and local imports
    return lambda: st.solve(lam)


def case_decode_solve() -> object:
    p, L = _mix()
    return _solve_at(DecodeStation(_Linear(), p, L, instances=4, dispatch="random"))


def case_decode_capped_solve() -> object:
    p, L = _mix()
    return _solve_at(DecodeStation(_Linear(), p, L, instances=4, kv_capacity_tokens=400_000, max_batch=256,
                                   first_step_in_ttft=True))


def case_decode_build() -> object:
    p, L = _mix()
    return lambda: DecodeStation(_Linear(), p, L, instances=4)


def case_colocated_solve() -> object:
    p, L = _mix()
    return _solve_at(ColocatedStation(_Linear(), p, L))


def case_colocated_build() -> object:
    p, L = _mix()
    return lambda: ColocatedStation(_Linear(), p, L)


def case_chunked_solve() -> object:
    p, L = _mix()
    return _solve_at(ChunkedStation(_Linear(), p, L, chunk_tokens=512))


def case_chunked_build() -> object:
    p, L = _mix()
    return lambda: ChunkedStation(_Linear(), p, L, chunk_tokens=512)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def test_bench_decode_solve(benchmark) -> None:
    benchmark(case_decode_solve())


def test_bench_decode_capped_solve(benchmark) -> None:
    benchmark(case_decode_capped_solve())


def test_bench_colocated_solve(benchmark) -> None:
    benchmark(case_colocated_solve())


def test_bench_chunked_solve(benchmark) -> None:
    benchmark(case_chunked_solve())


if __name__ == "__main__":
    from _timing import print_table  # beside this script (sys.path[0] when run as one)

    print_table(CASES, width=24)
