"""``qmodel examples list|copy NAME``: the bundled example scenarios (they ship in the package)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qmodel.cli.output import add_width_option, print_json, say

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("examples", help="list or copy the bundled example scenarios",
                       description="The example scenarios installed with qmodel: list them, or copy one to edit.")
    verbs = p.add_subparsers(dest="examples_cmd", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    ls = verbs.add_parser("list", help="names, what each shows, and the data files it needs")
    ls.add_argument("--json", action="store_true", help="print JSON")
    add_width_option(ls)
    ls.set_defaults(func=_list)
    cp = verbs.add_parser("copy", help="copy an example into a folder (default: here)")
    cp.add_argument("name", metavar="NAME")
    cp.add_argument("--dest", default=".", metavar="DIR", help="folder to copy into (default: the working directory)")
    cp.add_argument("--force", action="store_true", help="overwrite a file of the same name")
    cp.set_defaults(func=_copy)


def _list(args: argparse.Namespace) -> int:
    from qmodel.example_files import list_examples

    items = list_examples()
    if args.json:
        print_json({"examples": items})
        return 0
    import textwrap

    from qmodel.cli.output import text_width

    width = max(len(e.name) for e in items)
    pad = " " * (width + 2)
    for e in items:
        text = e.summary + (f" Needs {', '.join(e.needs_data)}." if e.needs_data else "")
        lines = textwrap.wrap(text, width=(text_width() or 10**6) - len(pad), break_long_words=False,
                              break_on_hyphens=False) or [""]
        print(e.name.ljust(width) + "  " + lines[0])
        for line in lines[1:]:
            print(pad + line)
    say("\ncopy one to edit it: qmodel examples copy NAME; data files: QMODEL_DATA_DIR, or qmodel trace fetch")
    return 0


def _copy(args: argparse.Namespace) -> int:
    from qmodel.example_files import copy_example

    path = copy_example(args.name, args.dest, force=args.force)
    print(f"wrote {path}; run: qmodel solve {path}", file=sys.stdout)
    return 0
