"""``qmodel perf import``: write a qmodel profile table from a measured source.

    qmodel perf import aic --hardware-key h200_sxm --model-key meta-llama/Meta-Llama-3.1-8B --tp 1
                           [--backend vllm] [--backend-version V] -o table.csv
    qmodel perf import vidur data:vidur/profiling --hardware-key a100 --model-key meta-llama/Llama-2-7b-hf
                           --model llama-2-7b --tp 1 [--network a100_dgx] -o table.csv
    qmodel perf import splitwise data:splitwise_sim/perf_model.csv --model-key llama2-70b
                           --hardware-key a100-80gb --tp 8 -o table.csv
    qmodel perf import distserve data:distserve/profiler-a100-80g.distserve.json
                           --model-key facebook/opt-13b --tp 1 -o table.csv
    qmodel perf import vllm-bench run-c1.json run-c8.json run-c32.json --tp 1 -o table.csv

Without ``-o`` the table goes to stdout. A scenario then uses ``perf: {kind: table, path: table.csv}``.
``qmodel calibrate --source SOURCE`` takes the same arguments (:func:`add_source_args`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qmodel.errors import InputError
from qmodel.perf.importers import SOURCES, ImportedTable

__all__ = ["register", "add_source_args", "import_from_args"]


def add_source_args(p: argparse.ArgumentParser, *, with_source: bool = True, with_keys: bool = True) -> None:
    """The arguments that name a measured source (shared by ``perf import`` and ``calibrate``;
    ``calibrate`` has its own SOURCE/PATH positionals and ``--model-key``/``--hardware-key``)."""
    if with_source:
        p.add_argument("source", metavar="SOURCE", help=f"one of {', '.join(SOURCES)}")
        p.add_argument("paths", metavar="PATH", nargs="*",
                       help="source file or folder (vidur: the profiling folder; vllm-bench: one or more result "
                            "JSONs; aic: none)")
    if with_keys:
        p.add_argument("--model-key", default=None,
                       help="the model's name in the source (aic/vidur: HF id, splitwise: llama2-70b, "
                            "distserve: facebook/opt-13b)")
        p.add_argument("--hardware-key", default=None,
                       help="the hardware's name in the source (aic: h200_sxm, vidur: a100, splitwise: a100-80gb)")
    p.add_argument("--backend", default="vllm", help="aic: backend database (vllm, sglang, trtllm)")
    p.add_argument("--backend-version", default=None, help="aic: database version (default: the latest)")
    p.add_argument("--moe-ep", type=int, default=1, help="aic: expert-parallel width of an MoE model (default 1)")
    p.add_argument("--network", default=None, help="vidur: network profile folder (default <sku>_dgx)")
    p.add_argument("--layers", type=int, default=None, help="vidur: transformer layers (default: from --model)")


def _need(args: argparse.Namespace, name: str, what: str) -> Any:
    value = getattr(args, name.replace("-", "_"))
    if value is None:
        raise InputError(f"--{name}", None, f"{args.source} needs --{name} ({what})")
    return value


def _one_path(args: argparse.Namespace, what: str) -> str:
    if len(args.paths) != 1:
        raise InputError("PATH", args.paths, f"{args.source} takes exactly one PATH ({what})")
    return str(args.paths[0])


def import_from_args(args: argparse.Namespace) -> ImportedTable:
    """Run the importer ``args.source`` names with the arguments of :func:`add_source_args`."""
    src = args.source
    if src not in SOURCES:
        raise InputError("SOURCE", src, f"one of {', '.join(SOURCES)}")
    if args.tp is None or args.tp < 1:
        raise InputError("--tp", args.tp, "a positive tensor-parallel degree of the measured instance")
    if src == "splitwise":
        from qmodel.perf.importers.measured import import_splitwise

        return import_splitwise(_one_path(args, "splitwise-sim perf_model.csv"),
                                _need(args, "model-key", "e.g. llama2-70b"), _need(args, "hardware-key", "e.g. a100-80gb"),
                                args.tp)
    if src == "distserve":
        from qmodel.perf.importers.measured import import_distserve

        return import_distserve(_one_path(args, "DistServe profiler JSON"),
                                _need(args, "model-key", "e.g. facebook/opt-13b"), args.tp)
    if src == "vidur":
        from qmodel.perf.importers.vidur import import_vidur

        layers = args.layers
        if layers is None:
            from qmodel.registry import get_model

            layers = get_model(_need(args, "model", "a catalog model name, for its layer count; or give --layers")).layers
        return import_vidur(_one_path(args, "Vidur profiling folder"), _need(args, "model-key", "e.g. meta-llama/Llama-2-7b-hf"),
                            _need(args, "hardware-key", "a100, a40 or h100"), args.tp, layers, network=args.network)
    if src == "vllm-bench":
        from qmodel.perf.importers.vllm_bench import import_vllm_bench

        if not args.paths:
            raise InputError("PATH", args.paths, "vllm-bench takes one or more result JSONs")
        return import_vllm_bench([str(p) for p in args.paths], args.tp)
    from qmodel.perf.importers.aic import import_aic

    if args.paths:
        raise InputError("PATH", args.paths, "aic reads the installed aiconfigurator database; give no PATH")
    return import_aic(_need(args, "model-key", "a HF model id the database covers, e.g. meta-llama/Meta-Llama-3.1-8B"),
                      _need(args, "hardware-key", "an aiconfigurator system, e.g. h200_sxm"), args.tp,
                      backend=args.backend, backend_version=args.backend_version, moe_ep=args.moe_ep)


def register(sub: Any) -> None:
    p = sub.add_parser("perf", help="step-time tables: import measured data (perf import SOURCE ...)",
                       description="Work with step-time tables.")
    verbs = p.add_subparsers(dest="perf_verb", metavar="ACTION")
    imp = verbs.add_parser("import", help="write a qmodel table from aic, vidur, splitwise, distserve or vllm-bench",
                           description="Write a qmodel CSV step-time table (prefill by tokens x batch, decode by batch "
                                       "x context, with provenance and SHA-256 in its header) from a measured source.")
    add_source_args(imp)
    imp.add_argument("--tp", type=int, default=None, help="tensor-parallel degree of the measured instance")
    imp.add_argument("--model", default=None, help="catalog model name (vidur: its layer count)")
    imp.add_argument("-o", "--out", default=None, help="output CSV (default: stdout)")
    imp.set_defaults(func=_run_import)
    p.set_defaults(func=_usage(p))


def _usage(p: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "perf_verb", None) is None:
            p.print_usage(sys.stderr)
            print("qmodel perf: error: choose an ACTION (import)", file=sys.stderr)
            return 2
        return 0
    return run


def _run_import(args: argparse.Namespace) -> int:
    table = import_from_args(args)
    if args.out is None:
        sys.stdout.write(table.to_csv())
        return 0
    sha = table.write(args.out)
    print(f"wrote {args.out}: {len(table.prefill)} prefill and {len(table.decode)} decode rows "
          f"({table.layout} layout), sha256 {sha}", file=sys.stderr)
    return 0
