"""``qmodel plan SCENARIO``: search deployments for the fewest GPUs, the lowest $/h, or the most goodput.

The scenario gives the model, workload, SLO and perf model (its own deployment only sets the
default GPU and link). ``--rates`` plans each period of a rate curve instead.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from qmodel.cli.common import add_scenario_args, scenario_from_args
from qmodel.cli.output import add_progress_option, print_json, print_table, progress_on, say, say_command
from qmodel.errors import InputError
from qmodel.units import format_bandwidth, format_duration

__all__ = ["register", "run", "parse_budget", "CSV_FIELDS"]

CSV_FIELDS = ["rank", "topology", "label", "prefill_gpu", "prefill_tp", "prefill_instances", "decode_gpu", "decode_tp",
              "decode_instances", "link", "transfer_mode", "chunk_tokens", "gpus", "power_w", "cost_per_hour_usd",
              "goodput_rps", "goodput_per_gpu", "usd_per_million_input_tokens", "usd_per_million_output_tokens",
              "usd_per_million_tokens", "rate_per_s", "attainment",
              "ttft_p90_s", "tpot_p90_s", "max_stable_rate_per_s", "knee_rps", "headroom_to_knee", "pareto",
              "binding", "validity"]


def _csv_list(text: str | None) -> list[str] | None:
    return None if not text else [t.strip() for t in text.split(",") if t.strip()]


def _int_list(text: str | None, field: str) -> list[int] | None:
    items = _csv_list(text)
    if items is None:
        return None
    try:
        return [int(t) for t in items]
    except ValueError:
        raise InputError(field, text, "a comma list of integers, e.g. 1,2,4,8") from None


def parse_budget(items: list[str]) -> dict[str, float]:
    """'16' / '16 gpus' -> gpus; '10 kW' / '7000 W' -> power_w; '$40/h' / '40 usd/h' -> cost_per_hour."""
    from qmodel.units import parse_power

    out: dict[str, float] = {}
    for raw in items:
        t = raw.strip().lower().replace(" ", "")
        try:
            if t.startswith("$") or t.endswith(("usd/h", "usd/hour", "$/h", "/h")):
                num = t.lstrip("$")
                for suf in ("usd/hour", "usd/h", "$/h", "/h"):
                    num = num.removesuffix(suf)
                out["cost_per_hour"] = float(num)
            elif t.endswith("w"):
                out["power_w"] = parse_power(raw, "--budget")
            else:
                num = t.removesuffix("gpus").removesuffix("gpu")
                n = float(num)
                if n != int(n):
                    raise ValueError
                out["gpus"] = int(n)
        except (ValueError, InputError):
            raise InputError("--budget", raw, "e.g. '16 gpus', '10 kW' or '$40/h'") from None
        if any(v <= 0 for v in out.values()):
            raise InputError("--budget", raw, "a positive amount")
    return out


def register(sub) -> None:
    p = sub.add_parser("plan", help="search deployments: fewest GPUs, lowest $/h, or most goodput in a budget",
                       description=__doc__.splitlines()[0].split(": ", 1)[-1])
    add_scenario_args(p)
    p.add_argument("--objective", choices=["min-gpus", "min-cost", "max-goodput"], default="min-gpus")
    p.add_argument("--target-rate", metavar="R", help="req/s to meet (min-gpus/min-cost; default: the scenario's rate)")
    p.add_argument("--gpus", help="GPU types, comma list (default: the scenario's)")
    p.add_argument("--prefill-gpus", help="GPU types for disaggregated prefill pools (default: --gpus)")
    p.add_argument("--decode-gpus", help="GPU types for disaggregated decode pools (default: --gpus)")
    p.add_argument("--links", help="KV links for disaggregated plans, comma list (default: the scenario's or ib-ndr-400)")
    p.add_argument("--tps", help="tensor-parallel sizes, comma list (default 1,2,4,8)")
    p.add_argument("--topologies", help="comma list of colocated, chunked, disaggregated (default: all)")
    p.add_argument("--transfer-modes", help="layerwise, serialized (default layerwise)")
    p.add_argument("--chunk-tokens", help="chunk budgets for chunked plans (default 512,2048)")
    p.add_argument("--max-instances", type=int, help="per pool (default 16)")
    p.add_argument("--max-gpus", type=int, help="per plan (default 64)")
    p.add_argument("--budget", action="append", default=[], metavar="AMOUNT",
                   help="max-goodput budget: '16 gpus', '10 kW' or '$40/h' (repeatable)")
    p.add_argument("--top", type=int, default=10, help="plans to rank (default 10)")
    p.add_argument("--check", type=int, default=0, metavar="K", help="replay the top K plans and report rank agreement")
    p.add_argument("--requests", "--check-requests", dest="requests", type=int, default=5000,
                   help="requests per replay with --check (default 5000; the same flag as solve's and sweep's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rates", help="a rate curve (req/s, comma list, e.g. 24 hourly rates): plan each period")
    p.add_argument("--period-hours", type=float, default=1.0, help="length of each --rates period (default 1 h)")
    p.add_argument("--workers", type=int, help="processes for the search (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the search on a Dask cluster (needs qmodel[dask])")
    p.add_argument("--serial", action="store_true", help="search in this process only")
    add_progress_option(p)
    p.add_argument("--no-knee", action="store_true", help="skip the knee of each ranked plan (a few solves each)")
    p.add_argument("--manifests", metavar="DIR",
                   help="write the best plan's vllm-serve.sh, dynamo.yaml (DynamoGraphDeployment) and kserve.yaml "
                        "(LLMInferenceService) into DIR")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON (docs/output-schema.json)")
    g.add_argument("--csv", action="store_true", help="print CSV, one row per ranked plan")
    p.set_defaults(func=run)


def _executor(args):
    if args.scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise InputError("--scheduler", args.scheduler, "needs Dask: pip install 'qmodel[dask]'") from None
        client = Client(args.scheduler)
        return client.get_executor(), client
    return ("serial" if args.serial else "auto"), None


def run(args: argparse.Namespace) -> int:
    from qmodel.planner import plan, plan_schedule
    from qmodel.units import parse_rate

    sc = scenario_from_args(args)
    kw = dict(gpus=_csv_list(args.gpus), prefill_gpus=_csv_list(args.prefill_gpus), decode_gpus=_csv_list(args.decode_gpus),
              links=_csv_list(args.links), tps=_int_list(args.tps, "--tps"), topologies=_csv_list(args.topologies),
              transfer_modes=_csv_list(args.transfer_modes), chunk_tokens=_int_list(args.chunk_tokens, "--chunk-tokens"),
              max_instances=args.max_instances, max_gpus=args.max_gpus, workers=args.workers,
              progress=progress_on(args))
    if args.top < 1:
        raise InputError("--top", args.top, "a positive number of plans")
    if args.check < 0:
        raise InputError("--check", args.check, "a non-negative number of plans")
    if args.requests < 1:
        raise InputError("--requests", args.requests, "a positive number of requests per replay")
    executor, client = _executor(args)
    try:
        if args.rates:
            rates = [parse_rate(r, "--rates") for r in args.rates.split(",")]
            objective = args.objective if args.objective != "max-goodput" else "min-gpus"
            res = plan_schedule(sc, rates, period_hours=args.period_hours, objective=objective, executor=executor, **kw)
            return _print_schedule(res, args)
        target = parse_rate(args.target_rate, "--target-rate") if args.target_rate else None
        res = plan(sc, args.objective, target_rate_per_s=target, budget=parse_budget(args.budget) or None, top_k=args.top,
                   check=args.check, check_requests=args.requests, seed=args.seed, executor=executor,
                   knee=not args.no_knee, **kw)
    finally:
        if client is not None:
            client.close()
    written = _write_manifests(res, args.manifests) if args.manifests else []
    if args.json:
        print_json(res)
    elif args.csv:
        _print_csv(res)
    else:
        _print_text(res)
    if args.manifests:
        stream = sys.stdout if not (args.json or args.csv) else sys.stderr
        say(f"\nwrote {', '.join(str(w) for w in written)}" if written else
            f"\nno plan meets the SLO: nothing written to {args.manifests}", stream)
    return 0  # "no plan meets the SLO" is an answer, printed as such; exit codes are 0, 2, 3 and 4 only


def _write_manifests(res, folder: str) -> list[Path]:
    """The best plan's launch files in ``folder`` (created): a bash script of its vllm serve lines and
    the Dynamo and KServe manifests as YAML."""
    import yaml

    if not res.serving_config:
        return []
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError("--manifests", folder, f"a folder qmodel can create ({err.strerror})") from None
    cfg = res.serving_config
    head = f"# qmodel plan for {res.scenario}: {res.plans[0].label}\n"
    lines = ["#!/usr/bin/env bash", head.rstrip(),
             "# every instance in the background on its own GPUs and port; Ctrl-C stops them all",
             "set -euo pipefail", "trap 'kill 0' EXIT"]
    gpu = 0
    total = sum(item["instances"] * item["gpus_per_instance"] for item in cfg["vllm"])
    if total > 8:
        lines.append(f"# this plan uses {total} GPUs: run each line on the node that holds its GPUs "
                     "(CUDA_VISIBLE_DEVICES numbers GPUs within a node)")
    for item in cfg["vllm"]:
        lines.append(f"# {item['role']}: {item['instances']} instance(s) x {item['gpus_per_instance']} {item['gpu']}")
        port = int(item["command"].split(" --port ")[1].split()[0])
        for i in range(item["instances"]):
            devices = ",".join(str((gpu + j) % 8 if total > 8 else gpu + j) for j in range(item["gpus_per_instance"]))
            gpu += item["gpus_per_instance"]
            cmd = item["command"].replace(f" --port {port} ", f" --port {port + i} ", 1)
            lines.append(f"CUDA_VISIBLE_DEVICES={devices} {cmd} &")
    lines += [f"# {n}" for n in cfg.get("notes", [])] + ["wait"]
    files = {"vllm-serve.sh": "\n".join(lines) + "\n",
             "dynamo.yaml": head + yaml.safe_dump(cfg["dynamo"], sort_keys=False),
             "kserve.yaml": head + yaml.safe_dump(cfg["kserve"], sort_keys=False)}
    written = []
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written


def _print_csv(res) -> None:
    w = csv.DictWriter(sys.stdout, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for p in res.plans:
        d = p.model_dump(by_alias=True)
        pre, dec = d.pop("prefill"), d.pop("decode")
        for role, pool in (("prefill", pre), ("decode", dec)):
            for k in ("gpu", "tp", "instances"):
                d[f"{role}_{k}"] = None if pool is None else pool[k]
        d.pop("goodput_per_usd_hour", None)
        w.writerow({k: d.get(k) for k in CSV_FIELDS})


def _print_text(res) -> None:
    goal = f"{res.attainment_goal * 100:g}%"
    what = {"min-gpus": f"fewest GPUs meeting {res.target_rate_per_s:.4g} req/s" if res.target_rate_per_s else "",
            "min-cost": f"lowest $/h meeting {res.target_rate_per_s:.4g} req/s" if res.target_rate_per_s else "",
            "max-goodput": "most goodput within " + (", ".join(f"{k}={v:g}" for k, v in res.budget.items()) or "the limits")}
    say(f"{res.scenario}: {res.model}, {what[res.objective]} at {goal} SLO attainment\n")
    if not res.plans:
        say("no plan meets the SLO in this search space")
    else:
        print_table(["#", "plan", "GPUs", "$/h", "goodput", "/GPU", "$/M out", "TTFT p90", "TPOT p90", "knee +", "P"],
                    [[p.rank, p.label, p.gpus, "-" if p.cost_per_hour is None else f"{p.cost_per_hour:.2f}",
                      f"{p.goodput_rps:.3g}", f"{p.goodput_per_gpu:.3g}",
                      "-" if p.usd_per_million_output_tokens is None else f"{p.usd_per_million_output_tokens:.3g}",
                      format_duration(p.ttft_p90_s), format_duration(p.tpot_p90_s),
                      "-" if p.headroom_to_knee is None else f"{p.headroom_to_knee * 100:+.0f}%", "*" if p.pareto else ""]
                     for p in res.plans])
        b = res.plans[0]
        say(f"\nbest: {b.label}\n  binding at {b.rate_per_s:.4g} req/s: {b.binding}\n  validity: {b.validity}")
        if b.cost_per_hour is not None and b.usd_per_million_tokens is not None:
            say(f"  cost ${b.cost_per_hour:.4g}/h at goodput {b.goodput_rps:.3g} req/s: "
                f"${b.usd_per_million_input_tokens:.3g}/M input, ${b.usd_per_million_output_tokens:.3g}/M output, "
                f"${b.usd_per_million_tokens:.3g}/M tokens")
        if b.link_path_bandwidth_bytes_per_s is not None and b.prefill is not None:
            per = b.link_path_bandwidth_bytes_per_s
            say(f"  KV link {b.link}: {b.prefill.instances} path(s) (one per prefill instance) x "
                f"{format_bandwidth(per, bits=True)} effective = "
                f"{format_bandwidth(per * b.prefill.instances, bits=True)} aggregate")
        say("  P = on the Pareto front of goodput per GPU vs p90 TTFT and TPOT; knee + = headroom to the knee")
    s = res.stats
    pr = ", ".join(f"{v} {k}" for k, v in sorted(s.pruned.items(), key=lambda kv: -kv[1]) if v)
    say(f"\nsearched {s.candidates} plans in {s.families} configurations in {s.seconds:.2f} s ({s.executor}): "
        f"{s.solves} solves, {s.feasible} feasible; {pr}")
    for n in res.notes:
        say(f"note: {n}")
    if res.serving_config:
        say("\nserving configuration (best plan):")
        for item in res.serving_config["vllm"]:
            say(f"  # {item['role']}: {item['instances']} instance(s) x {item['gpus_per_instance']} {item['gpu']}")
            say_command(item["command"])
        for n in res.serving_config.get("notes", []):
            say(f"  # {n}")
    if res.check:
        say(f"\ncheck: {res.check.summary}")
        print_table(["#", "attain. model", "replay", "TTFT p90 model", "replay", "TPOT p90 model", "replay"],
                    [[c.rank, f"{c.analytic_attainment * 100:.1f}%", f"{c.replay_attainment * 100:.1f}%",
                      format_duration(c.analytic_ttft_p90_s), format_duration(c.replay_ttft_p90_s), format_duration(c.analytic_tpot_p90_s),
                      format_duration(c.replay_tpot_p90_s)] for c in res.check.rows])


def _print_schedule(res, args) -> int:
    if args.json:
        print_json(res)
        return 0
    if args.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=["period", "rate_per_s", "hours", "label", "gpus", "cost_per_hour_usd"],
                           lineterminator="\n")
        w.writeheader()
        for p in res.periods:
            w.writerow(p.model_dump(by_alias=True))
        return 0
    print_table(["period", "req/s", "plan", "GPUs"], [[p.period, p.rate_per_s, p.label or "none meets the SLO", p.gpus]
                                                     for p in res.periods])
    say(f"\nGPU-hours {res.gpu_hours:.4g} vs {res.peak_gpu_hours:.4g} provisioned for the peak: "
        f"{res.gpu_hours_saved:.4g} saved ({res.saved_fraction * 100:.1f}%)")
    for n in res.notes:
        say(f"note: {n}")
    return 0
