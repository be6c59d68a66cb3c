"""``qmodel trace``: ``stats FILE`` summarises a trace; ``fetch NAME`` downloads a public one.

``stats`` prints count, duration, mean rate, inter-arrival CV, prompt/output mean and
percentiles, and the prefix block hit ratio (infinite cache) when the trace has Mooncake hash ids.
Malformed rows stop it with their line numbers (exit 2) unless ``--skip-bad-rows``, which then
names every skipped line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qmodel.cli.output import add_width_option

__all__ = ["register"]

# Kept here (not imported from qmodel.validation.traces) so building the CLI parser does not load numpy;
# a test checks the two lists agree.
_FORMATS = ("auto", "azure", "mooncake", "splitwise", "vidur", "sharegpt", "distserve", "qmodel")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("trace", help="inspect and download request traces",
                              description="Inspect request traces (stats) and download public ones (fetch).")
    sub = p.add_subparsers(dest="trace_cmd", metavar="ACTION")

    s = sub.add_parser("stats", help="summary statistics of a trace file",
                       description="Count, duration, mean rate, inter-arrival CV, length percentiles and "
                                   "prefix block hit ratio of a trace file.")
    s.add_argument("file", metavar="FILE", help="trace file (or data:REL under the data folder)")
    s.add_argument("--format", default="auto", choices=_FORMATS, help="trace format (default: detect)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--skip-bad-rows", action="store_true",
                   help="leave malformed rows out (their line numbers are printed) instead of failing")
    s.add_argument("--jitter-seed", type=int, default=None, metavar="N",
                   help="spread requests sharing a timestamp over their slot (Mooncake's 3 s slots)")
    add_width_option(s)
    s.set_defaults(func=_stats)

    f = sub.add_parser("fetch", help="download a public trace or table (checksum-verified)",
                       description="Download a public trace/table into the cache (or --dest), verifying its SHA-256.")
    f.add_argument("names", nargs="*", metavar="NAME", help="dataset name(s); see --list")
    f.add_argument("--dest", default=None, metavar="DIR", help="data folder to fill (default: the qmodel cache)")
    f.add_argument("--base-url", default=None, metavar="URL",
                   help="mirror holding the data-folder layout (default: $QMODEL_FETCH_BASE_URL, else GitHub)")
    f.add_argument("--list", action="store_true", help="list the known datasets")
    add_width_option(f)
    f.set_defaults(func=_fetch)

    p.set_defaults(func=lambda args: _help(p))


def _help(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def _tok(v: float) -> str:
    """Token statistics: whole numbers as such, interpolated percentiles and means to 0.1."""
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def _stats(args: argparse.Namespace) -> int:
    from qmodel.cli.output import print_json
    from qmodel.validation.trace_stats import trace_stats
    from qmodel.validation.traces import load_trace

    tr = load_trace(args.file, args.format, on_error="skip" if args.skip_bad_rows else "report",
                    jitter_seed=args.jitter_seed)
    st = trace_stats(tr)
    skipped = tr.meta.get("skipped") or []
    if skipped:
        lines = ", ".join(str(n) for n in tr.meta["skipped_lines"])
        print(f"qmodel: warning: skipped {len(skipped)} malformed row(s) at line(s) {lines}", file=sys.stderr)
        for why in skipped[:20]:
            print(f"  {why}", file=sys.stderr)
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more", file=sys.stderr)
    if args.json:
        print_json(st)
        return 0
    out = sys.stdout
    out.write(f"trace      {st['source']}\n")
    out.write(f"format     {st['format']}   sha256 {st['sha256'][:16]}\n")
    out.write(f"requests   {st['count']:,}\n")
    if st["lengths_only"]:
        out.write("arrivals   none (lengths-only file: use it as empirical lengths with poisson/gamma arrivals)\n")
    else:
        out.write(f"duration   {_num(st['duration_s'], ',.1f', ' s')}\n")
        out.write(f"mean rate  {_num(st['mean_rate_per_s'], '.3f', ' req/s')}\n")
        out.write(f"IA CV      {_num(st['interarrival_cv'], '.3f')}"
                  + (f"   ({st['zero_gap_fraction']:.1%} zero gaps: quantised timestamps)"
                     if st["zero_gap_fraction"] and st["zero_gap_fraction"] > 0.05 else "") + "\n")
    if st["prefix_block_hit_ratio"] is not None:
        out.write(f"prefix block hit (infinite cache, {st['block_tokens']}-token blocks)  "
                  f"{st['prefix_block_hit_ratio']:.1%}\n")
    out.write("\n")
    cols = ("mean", "p50", "p90", "p99", "min", "max")
    table = [["", *cols]] + [[label] + [_tok(st[key][c]) for c in cols]
                             for label, key in (("prompt tokens", "prompt_tokens"), ("output tokens", "output_tokens"))]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols) + 1)]
    for r in table:
        out.write("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip() + "\n")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from qmodel.cli.output import print_table
    from qmodel.errors import InputError
    from qmodel.validation.fetch import DATASETS, fetch

    if args.list:
        print_table(["name", "path", "bytes", "source"],
                    [[d.name, d.rel_path, f"{d.size_bytes:,}", f"{d.repo}@{d.commit[:8]}"] for d in DATASETS.values()])
        return 0
    if not args.names:
        raise InputError("NAME", None, f"give a dataset name ({', '.join(DATASETS)}) or --list")
    for name in args.names:
        r = fetch(name, dest=args.dest, base_url=args.base_url)
        verb = "fetched" if r.downloaded else "already present"
        print(f"{r.name}: {verb} {r.path} ({r.size_bytes:,} bytes, sha256 verified)")
    return 0
