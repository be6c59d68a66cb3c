"""``qmodel`` command line: one sub-command module per verb (``qmodel.cli.cmd_<verb>``).

Each module defines ``register(subparsers)`` which adds its parser and sets ``func``. Errors
derived from :class:`~qmodel.errors.QmodelError` print as one line on stderr with their exit code
(2 for bad input, 3 for an unstable configuration); argparse usage errors also exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from qmodel.errors import QmodelError

__all__ = ["main", "build_parser", "VERBS"]

#: Sub-commands in help order; each lives in qmodel/cli/cmd_<verb>.py
VERBS = ["solve", "goodput", "sweep", "compare", "plan", "replay", "validate", "trace", "catalog",
         "calibrate", "perf", "examples", "tui"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qmodel",
        description="Queueing-theory capacity planner for LLM serving (colocated, chunked prefill, P/D disaggregation).",
    )
    from qmodel import __version__

    parser.add_argument("--version", action="version", version=f"qmodel {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb in VERBS:
        try:
            mod = importlib.import_module(f"qmodel.cli.cmd_{verb}")
        except ModuleNotFoundError as err:
            if err.name == f"qmodel.cli.cmd_{verb}":
                continue  # verb not built into this version
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
