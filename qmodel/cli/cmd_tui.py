"""``qmodel tui [SCENARIO]``: the interactive what-if explorer (Textual, imported only when run)."""

from __future__ import annotations

import argparse

from qmodel.cli.output import add_set_option

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("tui", help="interactive what-if explorer in the terminal",
                       description="Edit a scenario and watch TTFT/TPOT, attainment, goodput, cost and the binding "
                                   "constraint update live; plot the knee, the latency distributions and the P:D "
                                   "split; pin and compare; run the planner and the replay check.")
    p.add_argument("scenario", metavar="SCENARIO", nargs="?", default=None,
                   help="scenario file to start from (.yaml, .toml or .json); default: a small example")
    add_set_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        from qmodel.tui.app import QmodelApp
    except ImportError as err:  # textual is a declared dependency; this guards broken installs
        from qmodel.errors import QmodelError

        raise QmodelError(f"the TUI needs Textual ({err}); install qmodel with its dependencies") from None
    # A file that cannot be read is a one-line error before the screen opens (exit 2); field errors
    # inside a readable file are shown next to the fields instead.
    app = QmodelApp(args.scenario, args.overrides)
    app.run()
    return 0
