"""The plain-table mode of the station benchmark scripts: each case timed for about a second."""

from __future__ import annotations

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
