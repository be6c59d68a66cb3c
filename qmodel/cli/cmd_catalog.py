"""``qmodel catalog``: list and show catalog entries, import a Hugging Face config.json.

    qmodel catalog list [--json]                  {"models": [...], "gpus": [...], "links": [...], "workloads": [...]}
    qmodel catalog show NAME [--json]             one entry with derived quantities and human strings
    qmodel catalog import-hf config.json --name NAME [--out DIR] [--hf-id ID]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qmodel.cli.output import add_width_option, print_json, print_table
from qmodel.errors import CatalogError
from qmodel.units import format_bandwidth, format_bytes, format_duration, format_flops

__all__ = ["register", "describe"]

_KINDS = ("model", "gpu", "link", "workload")


def _params(n: float) -> str:
    """8.03e9 -> '8.03B', 1.026e12 -> '1.03T'."""
    return f"{n / 1e12:.3g}T" if n >= 1e12 else f"{n / 1e9:.3g}B"


def register(sub: Any) -> None:
    p = sub.add_parser("catalog", help="list and show models, GPUs, links and workload presets; import HF configs",
                       description="Browse the catalog (bundled entries plus QMODEL_CATALOG_DIR).")
    csub = p.add_subparsers(dest="catalog_cmd", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    pl = csub.add_parser("list", help="names of every catalog entry")
    pl.add_argument("--json", action="store_true", help="print JSON")
    add_width_option(pl)
    pl.set_defaults(func=_cmd_list)

    ps = csub.add_parser("show", help="one entry with its derived quantities")
    ps.add_argument("name")
    ps.add_argument("--kind", choices=_KINDS, help="look only among this kind of entry")
    ps.add_argument("--json", action="store_true", help="print JSON")
    add_width_option(ps)
    ps.set_defaults(func=_cmd_show)

    pi = csub.add_parser("import-hf", help="convert a Hugging Face config.json into a catalog model entry")
    pi.add_argument("config", help="path to config.json")
    pi.add_argument("--name", required=True, help="catalog name, e.g. my-llama-8b")
    pi.add_argument("--out", default=None, help="folder to write NAME.toml (default: the user catalog, QMODEL_CATALOG_DIR)")
    pi.add_argument("--hf-id", default=None, help="Hugging Face repo id to record (default: _name_or_path if present)")
    pi.add_argument("--dtype", default=None, help="serving weight dtype (default: from the config, e.g. bf16, fp8)")
    pi.add_argument("--kv-dtype", default=None, help="default KV-cache dtype (default: bf16, fp16 for fp16 models)")
    pi.add_argument("--json", action="store_true", help="print the imported entry as JSON")
    pi.set_defaults(func=_cmd_import)


def _cmd_list(args: argparse.Namespace) -> int:
    from qmodel.registry import load_catalog

    cat = load_catalog()
    if args.json:
        print_json(cat.names())
        return 0
    out = sys.stdout
    out.write("models\n")
    print_table(["name", "attention", "layers", "params", "active", "kv/token", "context"],
                [[m.name, m.attention + ("+moe" if m.moe else ""), m.layers, _params(m.total_params),
                  _params(m.active_params), format_bytes(m.kv_bytes_per_token()), int(m.max_context_tokens)]
                 for m in sorted(cat.models.values(), key=lambda m: m.name)])
    out.write("\ngpus\n")
    print_table(["name", "memory", "mem bw", "bf16", "fp8", "link"],
                [[g.name, format_bytes(g.memory_bytes), format_bandwidth(g.memory_bandwidth_bytes_per_s),
                  format_flops(g.bf16_flops_per_s), format_flops(g.fp8_flops_per_s) if g.fp8_flops_per_s else "-",
                  g.intra_node_link or "-"] for g in sorted(cat.gpus.values(), key=lambda g: g.name)])
    out.write("\nlinks\n")
    print_table(["name", "kind", "bandwidth", "effective", "latency", "nics"],
                [[ln.name, ln.kind, format_bandwidth(ln.bandwidth_bytes_per_s),
                  format_bandwidth(ln.effective_bandwidth_bytes_per_s), format_duration(ln.latency_s), ln.nics]
                 for ln in sorted(cat.links.values(), key=lambda ln: ln.name)])
    out.write("\nworkloads\n")
    print_table(["name", "prompt median", "output median", "rate/s", "arrival cv"],
                [[w.name, w.lengths.prompt_median_tokens, w.lengths.output_median_tokens,
                  w.rate_per_s if w.rate_per_s else "-", w.arrival_cv]
                 for w in sorted(cat.workloads.values(), key=lambda w: w.name)])
    return 0


def describe(kind: str, entry: Any) -> dict[str, Any]:
    """The JSON shape of ``catalog show``: the entry's fields, derived quantities and human strings."""
    d: dict[str, Any] = {"catalog_kind": kind, **entry.model_dump(mode="python")}
    if kind == "model":
        d["kv_bytes_per_token"] = entry.kv_bytes_per_token()
        d["weight_bytes"] = entry.weight_bytes()
        d["active_weight_bytes"] = entry.active_weight_bytes()
        d["matmul_params_per_token"] = entry.matmul_params_per_token
        d["kv_bytes_at_max_context"] = entry.kv_bytes(entry.max_context_tokens)
        if entry.recurrent is not None:
            d["state_bytes_per_sequence"] = entry.state_bytes_per_sequence()
            d["recurrent_flops_per_token"] = entry.recurrent_flops_per_token()
        d["human"] = {
            "total_params": _params(entry.total_params),
            "active_params": _params(entry.active_params),
            "kv_bytes_per_token": f"{format_bytes(entry.kv_bytes_per_token())} ({entry.kv_dtype})",
            "kv_bytes_at_max_context": f"{format_bytes(entry.kv_bytes(entry.max_context_tokens))} "
                                       f"at {entry.max_context_tokens} tokens",
            **({"state_bytes_per_sequence": f"{format_bytes(entry.state_bytes_per_sequence())} in "
                f"{entry.recurrent.layers} {entry.recurrent.kind} layers (state {entry.recurrent.state_dtype}), "
                f"constant in the context"} if entry.recurrent is not None else {}),
            "weight_bytes": f"{format_bytes(entry.weight_bytes())} ({entry.dtype}"
                            f"{', experts ' + entry.expert_dtype if entry.expert_dtype else ''})",
        }
    elif kind == "gpu":
        d["human"] = {
            "memory": format_bytes(entry.memory_bytes),
            "memory_bandwidth": format_bandwidth(entry.memory_bandwidth_bytes_per_s),
            "bf16": format_flops(entry.bf16_flops_per_s),
            "fp8": format_flops(entry.fp8_flops_per_s) if entry.fp8_flops_per_s else None,
            "fp4": format_flops(entry.fp4_flops_per_s) if entry.fp4_flops_per_s else None,
            "intra_node_bandwidth": format_bandwidth(entry.intra_node_bandwidth_bytes_per_s) + " per direction",
            "intra_node_host_fabric": (f"{format_bandwidth(entry.intra_node_host_bandwidth_bytes_per_s)} shared past "
                                       f"{entry.intra_node_p2p_gpus} GPUs" if entry.intra_node_p2p_gpus else None),
            "tdp": f"{entry.tdp_watts:g} W",
        }
    elif kind == "link":
        d["effective_bandwidth_bytes_per_s"] = entry.effective_bandwidth_bytes_per_s
        d["human"] = {
            "bandwidth": f"{format_bandwidth(entry.bandwidth_bytes_per_s, bits=True)} "
                         f"({format_bandwidth(entry.bandwidth_bytes_per_s)}) per direction",
            "effective_bandwidth": format_bandwidth(entry.effective_bandwidth_bytes_per_s),
            "latency": format_duration(entry.latency_s),
        }
    return d


def _find(name: str, kind: str | None) -> tuple[str, Any]:
    from qmodel.registry import load_catalog

    cat = load_catalog()
    kinds = (kind,) if kind else _KINDS
    key = name.strip().lower()
    for k in kinds:
        bucket = cat.entries(k)
        if key in bucket:
            return k, bucket[key]
    known = [v.name for k in kinds for v in cat.entries(k).values()]
    raise CatalogError(kind or "catalog name", name, known)


def _cmd_show(args: argparse.Namespace) -> int:
    kind, entry = _find(args.name, args.kind)
    d = describe(kind, entry)
    if args.json:
        print_json(d)
        return 0
    rows: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            rows.extend((f"{k}.{sk}", sv) for sk, sv in v.items() if sv is not None)
        elif v is not None:
            rows.append((k, v))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        # Plain key/value lines: exact integers and full-precision floats, so the text can be copied back into TOML.
        text = f"{v:.10g}" if isinstance(v, float) else str(v)
        sys.stdout.write(f"{k.ljust(width)}  {text}\n")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from qmodel.hf_import import import_hf_config
    from qmodel.registry import clear_cache

    path, spec = import_hf_config(args.config, args.name, args.out, hf_id=args.hf_id, dtype=args.dtype,
                                  kv_dtype=args.kv_dtype)
    clear_cache()  # the next lookup in this process sees the new entry
    if args.json:
        print_json({"path": str(path), **describe("model", spec)})
        return 0
    print(f"wrote {path}")
    print(f"{spec.name}: {spec.layers} layers, {spec.attention}{' + moe' if spec.moe else ''}, "
          f"{spec.total_params / 1e9:.4g}B params ({spec.active_params / 1e9:.4g}B active), "
          f"KV {format_bytes(spec.kv_bytes_per_token())}/token ({spec.kv_dtype})")
    return 0
