"""One exception tree for qmodel, each class mapped to a CLI exit code.

The CLI catches :class:`QmodelError` at the top and prints ``str(err)`` as one line; nothing
below it should print tracebacks for user mistakes.

Exit codes:
    2  bad input (fields, units, names, files, trace rows)      -> :class:`InputError` and subclasses
    3  the configuration is unstable at the asked rate          -> :class:`UnstableError`
    4  a numerical method could not reach its accuracy          -> :class:`NumericalError`
    5  a download could not reach its server (offline, DNS, timeout) -> :class:`NetworkError`
    1  anything else qmodel raises on purpose                   -> :class:`QmodelError`
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "QmodelError",
    "InputError",
    "CatalogError",
    "DataError",
    "TraceRowError",
    "UnstableError",
    "NumericalError",
    "NetworkError",
    "exit_code_for",
    "shorten",
]

#: The most characters of a value an error message echoes (a kilobyte of nested garbage is not a message).
ECHO_CHARS = 80


def shorten(value: object, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (the middle elided), on one line."""
    text = repr(value).replace("\n", " ")
    if len(text) <= limit:
        return text
    keep = limit - 5
    return f"{text[:keep - keep // 3]} ... {text[-(keep // 3):]}"


class QmodelError(Exception):
    """Base of every error qmodel raises on purpose."""

    exit_code: int = 1


class InputError(QmodelError, ValueError):
    """Bad user input: names the field, the value and what is allowed."""

    exit_code = 2

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: {shorten(value)} is not valid; {allowed}")


class CatalogError(InputError):
    """An unknown catalog name; suggests the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str], field: str | None = None) -> None:
        import difflib

        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        if not close:
            # Substring matches catch "70b" -> "llama-3.1-70b" where difflib's ratio is too low.
            low = name.lower()
            close = [k for k in known if low in k.lower()][:3]
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else (
            f"run 'qmodel catalog list' to see the {len(known)} known {kind}s"
        )
        self.suggestions: list[str] = close
        super().__init__(field or kind, name, f"unknown {kind}; {hint}")


class DataError(InputError):
    """A data file (trace, table, scenario) that cannot be read as asked.

    The message shows a path longer than 80 characters as its first 40 and last 37 around "...",
    so the error stays one readable line; ``.path`` keeps it whole.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        shown = path if len(path) <= 80 else f"{path[:40]}...{path[-37:]}"
        QmodelError.__init__(self, f"{shown}: {problem}")
        self.field, self.value, self.allowed = path, None, problem


class TraceRowError(DataError):
    """Malformed rows in a trace; lists every bad line number (never drops rows silently)."""

    def __init__(self, path: str, bad: Sequence[tuple[int, str]]) -> None:
        self.bad = list(bad)
        shown = "; ".join(f"line {ln}: {why}" for ln, why in self.bad[:5])
        more = f" (and {len(self.bad) - 5} more)" if len(self.bad) > 5 else ""
        super().__init__(path, f"{len(self.bad)} malformed row(s): {shown}{more}")


class UnstableError(QmodelError):
    """A station's load is at or above 1: no steady state exists.

    Carries the station name, its load, the asked rate and the largest stable rate so callers
    (goodput bisection, the planner, the TUI) can act on it instead of seeing NaN or inf.
    """

    exit_code = 3

    def __init__(self, station: str, rho: float, rate_per_s: float, max_stable_rate_per_s: float,
                 detail: str = "") -> None:
        self.station = station
        self.rho = float(rho)
        self.rate_per_s = float(rate_per_s)
        self.max_stable_rate_per_s = float(max_stable_rate_per_s)
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{station} is unstable at {rate_per_s:.4g} req/s: load {rho:.4g} >= 1{extra}; "
            f"largest stable rate {max_stable_rate_per_s:.4g} req/s"
        )


class NumericalError(QmodelError):
    """A numerical method failed its own accuracy check (e.g. truncation too small)."""

    exit_code = 4


class NetworkError(QmodelError):
    """A server could not be reached: nothing is wrong with the input, so not exit code 2.

    The message says what to download by hand and where to put it.
    """

    exit_code = 5


def exit_code_for(err: BaseException) -> int:
    """The CLI exit code for an exception (1 for anything that is not a QmodelError)."""
    return err.exit_code if isinstance(err, QmodelError) else 1
