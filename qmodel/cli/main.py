"""``qmodel`` command line: one sub-command module per verb (``qmodel.cli.cmd_<verb>``).

Each module defines ``register(subparsers)`` which adds its parser and sets ``func``. A run imports
only its own verb's module: the others appear in ``qmodel --help`` as placeholders carrying the
one-line help of :data:`VERB_HELP` (a test checks it against each module's own), so ``qmodel solve``
does not load the planner, the importers, the replay or the TUI. Errors
derived from :class:`~qmodel.errors.QmodelError` print as one line on stderr with their exit code
(2 for bad input, 3 for an unstable configuration); argparse usage errors also exit 2.

A ``qmodel`` process runs BLAS on one thread unless the environment names a thread count
(``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``): the
solver's dense systems are small, so more threads only add start-up and contention (a fresh
``qmodel solve examples/llama3-70b-disagg-h100.yaml`` 0.70 -> 0.40 s on 2 cores, output
byte-identical on every example). It is set here, before numpy loads: ``import qmodel`` does not
load numpy (tests/test_cli_lazy.py checks both).

A ``qmodel`` process (``main()`` reading ``sys.argv``, as the console script calls it) freezes the
garbage collector's objects at exit (``gc.freeze``, registered first so it runs after the exit
handlers the run itself registers): the interpreter's shutdown collections then skip the ~50,000
objects numpy, pydantic and the solver leave alive, which took about a sixth of a fresh
``qmodel solve`` (docs/startup.md). Such a process also pauses the collector while the parser
imports its verb's module (numpy, pydantic, the scenario models: bounded work whose objects live
as long as the process; ~3% of a fresh ``qmodel solve``, round 8). Output is flushed and the exit
handlers run as before; a caller passing ``argv`` (tests, scripts) is left alone.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys
from collections.abc import Sequence

#: environment variables that set the BLAS thread count; none set: one thread (module doc)
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if "numpy" not in sys.modules and not any(os.environ.get(v) for v in BLAS_THREAD_VARS):
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

from qmodel.errors import QmodelError  # noqa: E402 - after the BLAS default, which must precede numpy

__all__ = ["main", "build_parser", "VERBS", "VERB_HELP", "BLAS_THREAD_VARS"]

#: Sub-commands in help order, each with the one-line help ``qmodel --help`` lists; each verb lives in
#: qmodel/cli/cmd_<verb>.py, whose ``register`` passes the same help to ``add_parser``
VERB_HELP: dict[str, str] = {
    "solve": "solve a scenario analytically (milliseconds)",
    "goodput": "largest rate whose SLO attainment meets the goal",
    "sweep": "attainment and TTFT/TPOT percentiles over a range of rates",
    "compare": "colocated vs chunked vs disaggregated on the same GPUs",
    "plan": "search deployments: fewest GPUs, lowest $/h, or most goodput in a budget",
    "replay": "replay a scenario with the event-driven simulator (seconds)",
    "validate": "analytic engine vs replay over a suite of scenarios (error table)",
    "trace": "inspect and download request traces",
    "catalog": "list and show models, GPUs, links and workload presets; import HF configs",
    "calibrate": "fit roofline factors (mfu, mbu, overheads) to a measured table",
    "perf": "step-time tables: import measured data (perf import SOURCE ...)",
    "examples": "list or copy the bundled example scenarios",
    "tui": "interactive what-if explorer in the terminal",
}
VERBS = list(VERB_HELP)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``qmodel`` parser: every verb's full parser, or, with ``only``, that verb's and a placeholder
    (same name and help, no options) for each other one, so no other verb's module is imported."""
    parser = argparse.ArgumentParser(
        prog="qmodel",
        description="Queueing-theory capacity planner for LLM serving (colocated, chunked prefill, P/D disaggregation).",
    )
    from qmodel import __version__

    parser.add_argument("--version", action="version", version=f"qmodel {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb, help_ in VERB_HELP.items():
        if only is not None and verb != only:
            sub.add_parser(verb, help=help_)
            continue
        try:
            mod = importlib.import_module(f"qmodel.cli.cmd_{verb}")
        except ModuleNotFoundError as err:
            if err.name == f"qmodel.cli.cmd_{verb}":
                continue  # verb not built into this version
            raise
        mod.register(sub)
    return parser


def _verb_of(argv: Sequence[str]) -> str:
    """The verb an argument list names: its first word that is not an option (the top-level parser
    takes only ``-h`` and ``--version``, neither with a value); "" when there is none."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    own = argv is None
    if own:  # this process's own command line: skip the shutdown collections (module doc)
        atexit.register(gc.freeze)
    argv = list(sys.argv[1:] if argv is None else argv)
    collecting = own and gc.isenabled()
    if collecting:
        gc.disable()  # the verb module's imports (module doc)
    try:
        parser = build_parser(only=_verb_of(argv))
        args = parser.parse_args(argv)
    finally:
        if collecting:
            gc.enable()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from qmodel.cli.output import DEFAULT_WIDTH, set_markdown, set_width

    markdown = bool(getattr(args, "markdown", False))
    set_markdown(markdown)
    set_width(None if getattr(args, "wide", False) or markdown else DEFAULT_WIDTH)
    try:
        rc = args.func(args)
    except QmodelError as err:
        print(f"qmodel: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
