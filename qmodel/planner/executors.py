"""Running the search's per-family tasks on any ``concurrent.futures.Executor``: a serial executor
for small searches and :func:`run_tasks`, results in input order with progress as they complete."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import Callable, Sequence

__all__ = ["SerialExecutor", "run_tasks"]


class SerialExecutor(Executor):
    """Runs each task in the calling thread at submit time (the executor for small searches)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:  # type: ignore[override]
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # the caller re-raises it from fut.result()
            fut.set_exception(err)
        return fut


def run_tasks(executor: Executor, fn: Callable, arg_list: Sequence[tuple], progress: Callable[[int], None] | None = None) -> list:
    """Submit ``fn(*args)`` for each args; results in input order; ``progress(done)`` after each completes."""
    from concurrent.futures import as_completed

    futures = [executor.submit(fn, *args) for args in arg_list]
    index = {f: i for i, f in enumerate(futures)}
    results: list = [None] * len(futures)
    done = 0
    for f in as_completed(futures):
        results[index[f]] = f.result()
        done += 1
        if progress:
            progress(done)
    return results
