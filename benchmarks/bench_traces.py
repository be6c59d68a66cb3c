"""Speed of trace loading and synthetic generation.

Run as a script (prints best-of-N wall times)::

    .venv/bin/python benchmarks/bench_traces.py

or with pytest-benchmark::

    .venv/bin/pytest benchmarks/bench_traces.py --benchmark-enable

Targets: the 19,366-row Azure conv trace parses (uncached) in well under a second, and 1M
synthetic requests generate in well under a second or two.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from qmodel.scenario import Workload
from qmodel.settings import data_dir
from qmodel.validation.synth import generate
from qmodel.validation.traces import clear_cache, load_trace

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "mooncake/conversation_trace.jsonl"

POISSON_LOGNORMAL = Workload.model_validate({
    "arrivals": {"kind": "poisson", "rate_per_s": 10.0},
    "lengths": {"kind": "lognormal", "prompt_median_tokens": 1000, "prompt_sigma": 0.9,
                "output_median_tokens": 150, "output_sigma": 0.8, "correlation": 0.2},
})


def _load_uncached(rel: str) -> Callable[[], object]:
    d = data_dir()
    if d is None or not (d / rel).exists():
        raise FileNotFoundError(rel)
    path = d / rel

    def run() -> object:
        clear_cache()
        return load_trace(path)

    return run


def _gamma_empirical() -> Workload:
    d = data_dir()
    if d is None:
        raise FileNotFoundError(AZURE_CONV)
    return Workload.model_validate({"arrivals": {"kind": "gamma", "rate_per_s": 10.0, "cv": 2.0},
                                    "lengths": {"kind": "empirical", "path": str(d / AZURE_CONV)}})


def cases() -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {
        "synth 1M poisson+lognormal": lambda: generate(POISSON_LOGNORMAL, 1_000_000, 0),
    }
    try:
        out["load azure conv (19,366 rows, uncached)"] = _load_uncached(AZURE_CONV)
        out["load mooncake conv (12,031 rows, uncached)"] = _load_uncached(MOONCAKE_CONV)
        w = _gamma_empirical()
        load_trace(w.lengths.path)  # the lengths trace is cached, as in the engine
        out["synth 1M gamma+empirical(azure conv)"] = lambda: generate(w, 1_000_000, 0)
    except FileNotFoundError:
        pass
    return out


def main(repeat: int = 5) -> None:
    for name, fn in cases().items():
        fn()  # warm-up (imports, page cache)
        best = min(_timed(fn) for _ in range(repeat))
        print(f"{name:45s} {best * 1e3:8.1f} ms (best of {repeat})")


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_bench_load_azure_conv(benchmark):
    import pytest

    try:
        fn = _load_uncached(AZURE_CONV)
    except FileNotFoundError:
        pytest.skip("data folder not found")
    benchmark(fn)


def test_bench_synth_1m(benchmark):
    benchmark(lambda: generate(POISSON_LOGNORMAL, 1_000_000, 0))


if __name__ == "__main__":
    main()
