"""Default roofline (shared efficiency curves, uncalibrated) vs every measured step-time source qmodel can reach.

    .venv/bin/python benchmarks/roofline_accuracy.py [--aic-points aic_points.csv] [--no-loo]

Prints markdown tables (docs/step_times.md holds the last run): per source x model x GPU x TP x
phase, the MAPE, signed bias (mean of predicted/measured - 1) and worst |error| of

* ``curves``: the default roofline (catalog/efficiency.toml), and
* ``constants``: the old constants roofline (mfu 0.55, mbu 0.75, overheads 10 / 4 ms), for reference;

then a leave-one-GPU-out run: for each AIC system, the curves are refitted without that system's
kernel tables and composed points (``qmodel.perf.efficiency_fit``; an architecture left without
data falls back to hopper with the all-reduce of the other architectures' median, as the catalog's
unmeasured architectures do) and tested on it.

Sources:

* AIConfigurator static estimates (``benchmarks/_aic_points.py``; vLLM, H100/H200/B200/A100/L40S):
  read from ``--aic-points``; collected there first when the file is missing and the optional
  extra ``qmodel[aic]`` is installed (~5 min), skipped with a note otherwise. LOO needs the extra.
* real vLLM serving runs (``aiconfigurator/silicon_sample.csv``: TPOT of Llama-3.1-70B FP8/NVFP4 and
  Qwen3-32B at concurrency <= 8; tp column 0 = the rows' own tp 1-8) against the decode step;
* splitwise-sim ``perf_model.csv``, DistServe's fitted profiles, Vidur's operator profiles
  (``../shared/data``; skipped with a note when absent). Vidur's composed steps omit attention,
  the LM head and CPU overheads, so they are compared with qmodel's GEMM + elementwise + all-reduce
  terms only (the LM head stays in: +0.4% of Llama-2-70B's weights, +7% of Llama-3-8B's).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qmodel.errors import QmodelError  # noqa: E402
from qmodel.perf.efficiency import EfficiencyCurves, load_curves  # noqa: E402
from qmodel.perf.roofline import RooflineModel  # noqa: E402
from qmodel.registry import get_gpu, get_model  # noqa: E402

SPLITWISE = [("llama-2-70b", "a100-80gb-sxm", 8), ("llama-2-70b", "h100-sxm", 8), ("llama-2-70b", "h100-sxm", 4),
             ("bloom-176b", "a100-80gb-sxm", 8), ("bloom-176b", "h100-sxm", 8)]
DISTSERVE = [("opt-13b", "profiler-a100-80g.distserve.json", 1), ("opt-66b", "profiler-a100-80g.distserve.json", 4),
             ("opt-13b", "profiler-a100-80g.vllm.json", 1), ("opt-66b", "profiler-a100-80g.vllm.json", 4)]
#: (catalog model, Vidur model key, sku, catalog GPU, tp)
VIDUR = [("llama-2-7b", "meta-llama/Llama-2-7b-hf", "h100", "h100-sxm", 1),
         ("llama-2-70b", "meta-llama/Llama-2-70b-hf", "h100", "h100-sxm", 4),
         ("codellama-34b", "codellama/CodeLlama-34b-Instruct-hf", "h100", "h100-sxm", 2),
         ("llama-2-7b", "meta-llama/Llama-2-7b-hf", "a100", "a100-80gb-sxm", 1),
         ("llama-3-8b", "meta-llama/Meta-Llama-3-8B", "a100", "a100-80gb-sxm", 1),
         ("llama-3-70b", "meta-llama/Meta-Llama-3-70B", "a100", "a100-80gb-sxm", 4)]
#: silicon_sample.csv (real vLLM serving runs, aggregated mode): model path -> catalog model; quant -> dtype
SILICON_MODELS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-32B": "qwen3-32b"}
SILICON_GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200"}
SILICON_DTYPE = {"fp8": "fp8", "nvfp4": "fp4", "": "bf16"}
#: concurrency cap: at 8 or fewer requests in flight the decode batch is the concurrency most of the time
SILICON_MAX_CONCURRENCY = 8
VIDUR_MAX_TOKENS = 4096  # Vidur's profiles stop at 4096 tokens per step
HEADER = "| source | model | GPU | tp | phase | points | MAPE | bias | max err | constants MAPE |"


def _row(source: str, model: str, gpu: str, tp: int, phase: str, pred: np.ndarray, old: np.ndarray | None,
         meas: np.ndarray) -> tuple[str, float]:
    e = pred / meas - 1.0
    mape = float(np.abs(e).mean())
    old_s = "n/a" if old is None else f"{100 * np.abs(old / meas - 1.0).mean():.1f}%"
    return (f"| {source} | {model} | {gpu} | {tp} | {phase} | {len(e)} | {100 * mape:.1f}% | {100 * e.mean():+.1f}% | "
            f"{100 * np.abs(e).max():.1f}% | {old_s} |", mape)


def _predict(rm: RooflineModel, phase: str, b: np.ndarray, n: np.ndarray, q: np.ndarray | None = None) -> np.ndarray:
    """Prefill: ``b`` prompts of ``n`` tokens (``q`` = sum of squares if given); decode: ``b`` sequences of context ``n``."""
    if phase == "prefill":
        return np.asarray(rm.prefill_time_s(b * n, b * n * n if q is None else q, b), dtype=float)
    return np.asarray(rm.decode_step_time_s(b, b * n), dtype=float)


# ---- AIC ------------------------------------------------------------------------------------
def aic_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def aic_table(rows: list[dict[str, str]], curves: EfficiencyCurves | None, label: str = "AIC vLLM",
              only_system: str | None = None) -> list[tuple[str, float]]:
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for r in rows:
        if only_system is None or r["system"] == only_system:
            groups.setdefault((r["aic_model"], r["model"], r["gpu"], r["tp"], r["dtype"], r["kv_dtype"], r["phase"]),
                              []).append(r)
    out = []
    for (key, model, gpu, tp, dtype, kv, phase), rs in groups.items():
        spec = get_model(model)
        if kv:
            spec = spec.model_copy(update={"kv_dtype": kv})
        g = get_gpu(gpu)
        b = np.array([float(r["batch"]) for r in rs])
        n = np.array([float(r["length"]) for r in rs])
        meas = np.array([float(r["time_s"]) for r in rs])
        new = _predict(RooflineModel(spec, g, int(tp), compute_dtype=dtype, curves=curves or load_curves()), phase, b, n)
        old = _predict(RooflineModel(spec, g, int(tp), compute_dtype=dtype, curves=None), phase, b, n)
        out.append(_row(label, key.split("/")[-1], gpu, int(tp), phase, new, old, meas))
    return out


def loo_curves(rows_csv: Path, system: str) -> EfficiencyCurves:
    """The shared curves refitted without ``system``'s kernel tables and composed points."""
    from qmodel.perf.efficiency_fit import fit_all, fit_overheads, pooled_allreduce, unmeasured

    fitted = fit_all(exclude=(system,))
    for arch, o in fit_overheads(fitted, rows_csv, exclude=(system,)).items():
        fitted[arch]["overhead"] = o
    for arch, c in fitted.items():
        if arch != "hopper" and any(t not in c for t in ("attention", "allreduce", "moe", "overhead")):
            c["fallback"] = "hopper"
    blank = {"allreduce": pooled_allreduce(fitted)}  # left without data: as the catalog's unmeasured architectures
    fallbacks = unmeasured(fitted)
    for arch in ("hopper", "blackwell", "ampere", "ada"):
        fitted.setdefault(arch, {**blank, "fallback": "hopper" if arch != "hopper" else "blackwell"})
    return EfficiencyCurves.from_mapping({**fitted, **fallbacks}, origin=f"leave-out {system}")


# ---- measured tables in ../shared/data -------------------------------------------------------
def table_rows(data: Path) -> list[tuple[str, float]]:
    from qmodel.perf.service_time import table_model

    out = []
    sw = data / "splitwise_sim" / "perf_model.csv"
    for model, gpu, tp in SPLITWISE if sw.exists() else []:
        try:
            tm = table_model(str(sw), get_model(model), get_gpu(gpu), tp)
        except QmodelError as err:
            print(f"note: splitwise {model} {gpu} tp {tp}: {err}")
            continue
        out += _points_rows("splitwise-sim", model, gpu, tp, tm.points())  # type: ignore[attr-defined]
    for model, fname, tp in DISTSERVE:
        p = data / "distserve" / fname
        if not p.exists():
            continue
        tm = table_model(str(p), get_model(model), get_gpu("a100-80gb-sxm"), tp)
        engine = fname.split(".")[1]
        out += _points_rows(f"DistServe ({engine})", model, "a100-80gb-sxm", tp, tm.points())  # type: ignore[attr-defined]
    out += silicon_rows(data / "aiconfigurator" / "silicon_sample.csv")
    vid = data / "vidur" / "profiling"
    if vid.is_dir():
        from qmodel.perf.importers.vidur import import_vidur

        for model, key, sku, gpu, tp in VIDUR:
            spec = get_model(model)
            tm = import_vidur(str(vid), key, sku, tp, spec.layers,
                              network=f"{sku}_dgx" if tp > 1 else None).to_model()
            # only the profiled range: beyond 4096 tokens the importer continues each operator's last
            # slope, which goes negative for some (Llama-2-7B H100 at 13,776 tokens: -55 ms)
            pts = [p for p in tm.points() if p.phase == "decode" or p.sum_tokens <= VIDUR_MAX_TOKENS]  # type: ignore[attr-defined]
            out += _points_rows("Vidur (kernels only)", model, gpu, tp, pts, kernels_only=True)
    if not out:
        print(f"note: no measured tables under {data} (set QMODEL_DATA_DIR); splitwise/DistServe/Vidur rows skipped")
    return out


def silicon_rows(path: Path) -> list[tuple[str, float]]:
    """Real vLLM TPOT (AIC's silicon_sample.csv, agg mode, pp 1, concurrency <= 8) vs the decode step at
    batch = concurrency and the mean context isl + osl/2. The measured TPOT also carries the prefill
    stalls of aggregated serving, so the step should read a few percent low."""
    if not path.exists():
        return []
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["backend"] == "vllm" and r["mode"] == "agg" and r["pp_size"] == "1"
                and r["model_path"] in SILICON_MODELS and r["system"] in SILICON_GPUS
                and r["gemm_quant_mode"] in SILICON_DTYPE and r["attention_dp_size"] in ("1", "")
                and int(r["batch_size"]) <= SILICON_MAX_CONCURRENCY]
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r["model_path"], r["system"], r["gemm_quant_mode"]), []).append(r)
    out = []
    for (mp, system, quant), rs in sorted(groups.items()):
        spec, gpu, dtype = get_model(SILICON_MODELS[mp]), get_gpu(SILICON_GPUS[system]), SILICON_DTYPE[quant]
        new, old = [], []
        for r in rs:
            b, ctx = float(r["batch_size"]), float(r["isl"]) + float(r["osl"]) / 2
            for curves, acc in (("catalog", new), (None, old)):
                m = RooflineModel(spec, gpu, int(r["tp_size"]), compute_dtype=dtype, curves=curves)
                acc.append(float(m.decode_step_time_s(b, b * ctx)))
        meas = np.array([float(r["silicon_tpot_ms"]) / 1e3 for r in rs])
        out.append(_row(f"vLLM runs (silicon_sample, {dtype})", SILICON_MODELS[mp], gpu.name, 0, "decode (TPOT)",
                        np.array(new), np.array(old), meas))
    return out


def _points_rows(source: str, model: str, gpu: str, tp: int, points: list, kernels_only: bool = False
                 ) -> list[tuple[str, float]]:
    spec, g = get_model(model), get_gpu(gpu)
    new_m = RooflineModel(spec, g, tp, curves=load_curves())
    old_m = RooflineModel(spec, g, tp, curves=None)
    out = []
    for phase in ("prefill", "decode"):
        pts = [p for p in points if p.phase == phase]
        if not pts:
            continue
        meas = np.array([p.time_s for p in pts])
        n = np.array([float(p.n) for p in pts])
        if phase == "prefill":
            t, q = np.array([p.sum_tokens for p in pts]), np.array([p.sum_sq_tokens for p in pts])
            args = (t, q)
            new, old = new_m.prefill_time_s(t, q, n), old_m.prefill_time_s(t, q, n)
        else:
            s = np.array([p.sum_context_tokens for p in pts])
            args = (n, s)
            new, old = new_m.decode_step_time_s(n, s), old_m.decode_step_time_s(n, s)
        if kernels_only:  # Vidur: GEMMs, norms/activations and all-reduce only (no attention, no overhead)
            bd = new_m.prefill_breakdown(*args) if phase == "prefill" else new_m.decode_breakdown(*args)
            new = bd["gemm_s"] + bd["launch_s"] + bd["comm_s"]
            old = None  # the constants roofline has no kernels-only form (attention sits inside its max)
        out.append(_row(source, model, gpu, tp, phase, np.asarray(new, float),
                        None if old is None else np.asarray(old, float), meas))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-points", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "qmodel_aic_points.csv")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-GPU-out refits")
    a = ap.parse_args()
    try:
        import aiconfigurator_core  # noqa: F401
        have_aic = True
    except ImportError:
        have_aic = False
    rows: list[dict[str, str]] = []
    if a.aic_points.exists():
        rows = aic_rows(a.aic_points)
    elif have_aic:
        print(f"collecting AIC static estimates into {a.aic_points} (about 5 minutes) ...")
        from _aic_points import collect

        collect(a.aic_points)
        rows = aic_rows(a.aic_points)
    else:
        print("note: AIC rows skipped: no --aic-points file and the optional extra qmodel[aic] is not installed")
    print("\n## Default roofline (curves) vs measured step times\n")
    print(HEADER)
    print("|" + "---|" * 10)
    table = aic_table(rows, None) if rows else []
    from qmodel.settings import data_dir

    d = data_dir()
    if d is None:
        print("note: no data folder (set QMODEL_DATA_DIR to ../shared/data); splitwise/DistServe/Vidur rows skipped")
    else:
        table += table_rows(Path(d))
    for line, _ in table:
        print(line)
    if rows and not a.no_loo:
        if not have_aic:
            print("\nnote: leave-one-GPU-out skipped: refitting needs the optional extra qmodel[aic]")
            return
        print("\n## Leave-one-GPU-out (curves refitted without the GPU, tested on it)\n")
        print(HEADER)
        print("|" + "---|" * 10)
        worst = 0.0
        for system in sorted({r["system"] for r in rows}):
            for line, mape in aic_table(rows, loo_curves(a.aic_points, system), f"AIC LOO {system}", system):
                print(line)
                worst = max(worst, mape)
        print(f"\nworst leave-one-GPU-out MAPE: {100 * worst:.1f}%")


if __name__ == "__main__":
    main()
