"""Argument helpers shared by the scenario verbs (solve, goodput, sweep, compare, replay, plan)."""

from __future__ import annotations

import argparse
import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from qmodel.cli.output import add_set_option, add_width_option
from qmodel.errors import InputError
from qmodel.scenario import Scenario, load_scenario
from qmodel.units import parse_rate

if TYPE_CHECKING:  # qmodel.build loads the solver's stack: only where a verb resolves
    from qmodel.build import Resolved

__all__ = ["add_scenario_args", "scenario_from_args", "resolved_scenario_from_args", "parse_rate_range", "gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one bounded piece of work (a scenario load and one
    solve): its collections during the lazy imports and the first solve were ~8% of a fresh
    ``qmodel solve`` (docs/startup.md). Collection resumes after it (if it was on), so the cycles
    the piece left are collected then."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def add_scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="scenario file (.yaml, .toml or .json)")
    add_set_option(p)
    add_width_option(p)


def scenario_from_args(args: argparse.Namespace, warn: bool = True) -> Scenario:
    """The verb's scenario, validated the same way for every verb (one scenario path): see
    :func:`resolved_scenario_from_args`."""
    return resolved_scenario_from_args(args, warn)[0]


def resolved_scenario_from_args(args: argparse.Namespace, warn: bool = True) -> tuple[Scenario, Resolved]:
    """The verb's scenario and its resolution, validated the same way for every verb (one scenario
    path); a verb that solves hands the resolution to its ``Solver`` rather than resolving twice.

    Schema validation (:func:`~qmodel.scenario.load_scenario`) is followed by
    :func:`qmodel.build.resolve`: catalog names, model fit and KV room of every pool, the workload.
    So ``compare`` and ``plan``, which re-lay the GPUs, refuse a scenario that ``solve`` refuses
    (exit 2 naming the field) instead of searching around it. The resolution's warnings (requests
    truncated to the context) go to stderr as ``qmodel: warning: ...`` lines unless ``warn`` is
    False, for verbs whose own output carries them (solve, replay).
    """
    import sys

    from qmodel.build import resolve

    path = args.scenario
    from qmodel.example_files import bundled_fallback

    bundled = bundled_fallback(path)
    if bundled is not None:
        import importlib.resources as ir

        print(f"qmodel: note: {path} is not here; using the bundled example "
              f"(qmodel examples copy {bundled.name.rsplit('.', 1)[0]} to edit it)", file=sys.stderr)
        with ir.as_file(bundled) as real:
            sc = load_scenario(real, args.overrides)
    else:
        sc = load_scenario(path, args.overrides)
    resolved = resolve(sc)
    for line in resolved.warnings if warn else ():
        print(f"qmodel: warning: {line.removeprefix('warning: ')}", file=sys.stderr)
    return sc, resolved


def parse_rate_range(text: str, field: str = "--rate") -> list[float]:
    """'0.2:2.0:0.1' -> [0.2, 0.3, ..., 2.0] (inclusive, rounded to avoid float drift); 'a,b,c' -> list."""
    try:
        if ":" in text:
            lo_s, hi_s, step_s = text.split(":")
            lo, hi, step = parse_rate(lo_s, field), parse_rate(hi_s, field), parse_rate(step_s, field)
            if step <= 0 or hi < lo or lo <= 0:
                raise ValueError
            n = int(math.floor((hi - lo) / step + 1e-9)) + 1  # HI inclusive, never passed
            if n > 10000:
                raise InputError(field, text, "at most 10000 rates per sweep")
            return [round(lo + i * step, 10) for i in range(n)]
        vals = [parse_rate(v, field) for v in text.split(",")]
        if any(v <= 0 for v in vals):
            raise ValueError
        return vals
    except ValueError:
        raise InputError(field, text, "expected LO:HI:STEP with 0 < LO <= HI and STEP > 0, or a comma list of positive rates") from None
