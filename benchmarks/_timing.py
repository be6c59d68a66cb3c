"""Timing helpers of the benchmark scripts: the station scripts' plain table (each case for about a
second) and the median CPU time of repeated calls."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def print_table(cases: dict[str, Callable[[], Callable[[], object]]], width: int = 24) -> None:
    """For each case (a maker returning the call to time): warm it once, call it for ~1 s, and
    print wall and CPU ms per call (CPU time is less sensitive to a busy machine)."""
    for name, make in cases.items():
        fn = make()
        fn()  # warm caches and imports
        reps, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < 1.0:
            fn()
            reps += 1
        wall = 1e3 * (time.perf_counter() - t0) / reps
        cpu = 1e3 * (time.process_time() - c0) / reps
        print(f"{name:{width}s} {wall:9.3f} ms/call wall {cpu:9.3f} ms/call cpu  ({reps} calls)")


def median_cpu_ms(fn: Callable[[], object], repeat: int, warm: bool = True) -> float:
    """Median CPU time (``time.process_time``, ms) of ``repeat`` calls of ``fn``, after one untimed
    call when ``warm`` (caches and imports filled)."""
    if warm:
        fn()
    times = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        times.append(time.process_time() - c)
    return 1e3 * statistics.median(times)
