"""One progress bar for every long verb (plan, sweep, compare, goodput --sensitivities, replay,
validate): one line on stderr, redrawn in place, only when enabled (``--progress``, or by default
when stderr is a terminal), so pipes, JSON and CI logs stay clean."""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

__all__ = ["Progress", "ProgressFn"]

#: what a library function accepts: ``progress(done, total, what)``
ProgressFn = Callable[[int, int, str], None]


class Progress:
    """``update(done, total, what)`` redraws ``label: what done/total [####    ] 1.2s``; ``close()``
    ends the line. Disabled, both do nothing."""

    def __init__(self, enabled: bool, label: str = "qmodel", stream: TextIO | None = None, width: int = 24) -> None:
        self.enabled = enabled
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.perf_counter()
        self._drawn = False

    def update(self, done: int, total: int, what: str) -> None:
        if not self.enabled or total <= 0:
            return
        filled = int(self.width * min(done, total) / total)
        self.stream.write(f"\r{self.label}: {what} {done}/{total} [{'#' * filled}{' ' * (self.width - filled)}] "
                          f"{time.perf_counter() - self.t0:5.1f}s")
        self.stream.flush()
        self._drawn = True

    def __call__(self, done: int, total: int, what: str) -> None:
        self.update(done, total, what)

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
