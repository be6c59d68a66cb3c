"""The AIConfigurator silicon database -> qmodel grid table (optional extra ``qmodel[aic]``).

AIConfigurator (``aiconfigurator`` / ``aiconfigurator-core`` 0.12, Apache-2.0, NVIDIA) ships
per-operator kernel measurements (GEMM, attention, communication, MoE ... as parquet files under
``aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/``) for H100, H200, B200,
B300, GB200, GB300, A100, L40S, ... and composes them into step times. qmodel asks it, through
its public Python API ``aiconfigurator.cli.api.cli_estimate`` (database mode ``SILICON``), for
its *static* estimates:

* prefill grid node (batch ``n``, prompt ``p``): ``mode="static_ctx"``, ``batch_size=n``,
  ``isl=p``, ``osl=1`` -> the ``ttft`` of one static batch of ``n`` prompts of ``p`` tokens;
* decode grid node (batch ``n``, context ``c``): ``mode="static_gen"``, ``batch_size=n``,
  ``isl=c``, ``osl=2`` -> the ``tpot`` of the single decode step of ``n`` sequences holding ``c``
  tokens of KV (the step that computes their next token).

Those are the database's numbers at the nodes; between them the table interpolates
(:class:`~qmodel.perf.grid.GridTableModel`). Agreement with AIC's own static estimates off the
nodes is measured by ``benchmarks/perf_import_aic.py`` (docs/perf_import.md).

Only models whose config ships with the database are accepted (AIC would otherwise try to
download ``config.json`` from Hugging Face). The header records the database's resolved
version and one SHA-256 over that version's data files for the system and backend.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

from qmodel.errors import CatalogError, DataError, InputError
from qmodel.perf.importers import ImportedTable, sha256_tree

__all__ = ["import_aic", "aic_static_ms", "aic_systems", "aic_models", "AIC_PROMPTS", "AIC_PREFILL_BATCHES",
           "AIC_DECODE_BATCHES", "AIC_CONTEXTS", "EXTRA_HINT"]

#: prefill grid: prompt lengths (four per doubling, 64..32768) x batch sizes
AIC_PROMPTS: tuple[int, ...] = tuple(round(64 * 2 ** (k / 4)) for k in range(37))
AIC_PREFILL_BATCHES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 12, 16)
#: decode grid: batch sizes x contexts (as the prompts). The batch is the decode GEMMs' M; AIC's
#: GEMM tables are measured at every M to 17 and at pairs (m, m + 1) on tile boundaries (multiples
#: of 16 to 128, of 32 to 256), with jumps in between the pair, so the grid holds both sides of
#: each boundary and linear interpolation follows AIC's own between them.
AIC_DECODE_BATCHES: tuple[int, ...] = tuple(sorted({*range(1, 18), *(m + d for m in range(32, 129, 16) for d in (0, 1)),
                                                    *(m + d for m in range(160, 257, 32) for d in (0, 1)),
                                                    320, 384, 448, 512}))
AIC_CONTEXTS: tuple[int, ...] = AIC_PROMPTS
EXTRA_HINT = "install the optional extra: pip install 'qmodel[aic]'"


def _core_root() -> Path:
    try:
        import aiconfigurator.cli.api  # noqa: F401  (the API qmodel calls)
        import aiconfigurator_core
    except ImportError:
        raise InputError("perf import aic", "aiconfigurator", f"not installed; {EXTRA_HINT}") from None
    return Path(str(resources.files(aiconfigurator_core)))


def aic_systems() -> list[str]:
    """Systems the installed database has data for (e.g. h200_sxm)."""
    data = _core_root() / "systems" / "data"
    return sorted(p.name for p in data.iterdir() if p.is_dir())


def aic_models() -> list[str]:
    """HF ids of the model configs bundled with the installed database."""
    cfg = _core_root() / "model_configs"
    return sorted(p.name[: -len("_config.json")].replace("--", "/", 1) for p in cfg.glob("*_config.json")
                  if not p.name.endswith("_hf_quant_config.json"))


def _estimate(model_key: str, system: str, tp: int, *, mode: str, batch_size: int, isl: int, osl: int,
              backend: str, backend_version: str | None, moe_ep: int) -> Any:
    _core_root()
    from aiconfigurator.cli.api import cli_estimate

    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        r = cli_estimate(model_key, system, mode=mode, backend_name=backend, backend_version=backend_version,
                         isl=isl, osl=osl, batch_size=batch_size, tp_size=tp, moe_ep_size=moe_ep)
    except (ValueError, AssertionError, RuntimeError, KeyError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"aic {system}/{backend}", f"{model_key} tp {tp}: {first}") from None
    value = float(r.ttft if mode == "static_ctx" else r.tpot)
    if not value > 0:
        raise DataError(f"aic {system}/{backend}", f"{model_key} tp {tp}: no {mode} estimate at batch {batch_size}, "
                                                   f"isl {isl}")
    return r


def aic_static_ms(model_key: str, system: str, tp: int, *, mode: str, batch_size: int, isl: int, osl: int,
                  backend: str = "vllm", backend_version: str | None = None, moe_ep: int = 1) -> tuple[float, str]:
    """One static estimate from AIC (ttft for static_ctx, tpot for static_gen) in ms, and the resolved version.

    ``moe_ep`` is the expert-parallel width of an MoE model (AIC infers the expert-TP width as
    ``tp / moe_ep``); dense models ignore it.
    """
    r = _estimate(model_key, system, tp, mode=mode, batch_size=batch_size, isl=isl, osl=osl, backend=backend,
                  backend_version=backend_version, moe_ep=moe_ep)
    return float(r.ttft if mode == "static_ctx" else r.tpot), str(r.backend_version)


def _precision(r: Any) -> str:
    raw = r.raw if isinstance(getattr(r, "raw", None), dict) else {}
    return ", ".join(f"{k} {raw[k]}" for k in ("gemm", "kvcache", "fmha", "moe", "comm") if k in raw)


def _check_names(model_key: str, system: str, backend: str) -> Path:
    systems = aic_systems()
    if system not in systems:
        raise CatalogError("aic system", system, systems, field="--hardware-key")
    models = aic_models()
    if model_key not in models and not Path(model_key).is_dir():
        raise CatalogError("aic model", model_key, models, field="--model-key")
    root = _core_root() / "systems" / "data" / system
    backends = sorted(p.name for p in (root / "gemm").glob("*") if p.is_dir())  # every backend measures GEMMs
    if backend not in backends:
        raise InputError("--backend", backend, f"the database has {system} data for {', '.join(backends)}")
    return root


def import_aic(model_key: str, system: str, tp: int, *, backend: str = "vllm", backend_version: str | None = None,
               moe_ep: int = 1,
               prompts: tuple[int, ...] = AIC_PROMPTS, prefill_batches: tuple[int, ...] = AIC_PREFILL_BATCHES,
               decode_batches: tuple[int, ...] = AIC_DECODE_BATCHES, contexts: tuple[int, ...] = AIC_CONTEXTS
               ) -> ImportedTable:
    """Evaluate AIC's static prefill and decode estimates on the grid (see the module docstring)."""
    root = _check_names(model_key, system, backend)
    if moe_ep < 1:
        raise InputError("--moe-ep", moe_ep, "a positive expert-parallel width")
    kw: dict[str, Any] = {"backend": backend, "backend_version": backend_version, "moe_ep": moe_ep}
    first = _estimate(model_key, system, tp, mode="static_gen", batch_size=1, isl=prompts[0], osl=2, **kw)
    version = str(first.backend_version)
    first_ctx = _estimate(model_key, system, tp, mode="static_ctx", batch_size=1, isl=prompts[0], osl=1,
                          **{**kw, "backend_version": version})
    kw["backend_version"] = version  # resolving "latest" re-reads hundreds of YAML files per call
    pre = []
    for n in prefill_batches:
        for p in prompts:
            ms, _ = aic_static_ms(model_key, system, tp, mode="static_ctx", batch_size=n, isl=p, osl=1, **kw)
            pre.append((float(n), float(p), ms / 1000.0))
    dec = []
    for n in decode_batches:
        for c in contexts:
            ms, _ = aic_static_ms(model_key, system, tp, mode="static_gen", batch_size=n, isl=c, osl=2, **kw)
            dec.append((float(n), float(c), ms / 1000.0))
    files = sorted(f for f in root.glob(f"*/{backend}/{version}/*") if f.is_file())
    from importlib.metadata import version as dist_version

    return ImportedTable(
        source="aic", layout="grid", tp=tp, prefill=pre, decode=dec,
        header={"source_file": [f"aiconfigurator-core {dist_version('aiconfigurator-core')} "
                                f"systems/data/{system}/*/{backend}/{version} ({len(files)} files) "
                                f"sha256={sha256_tree(root, files)}"],
                "model": model_key, "hardware": system, "backend": f"{backend} {version}",
                "parallel": f"tp {tp}, moe_ep {moe_ep} (MoE models only), pp 1",
                "precision": f"prefill: {_precision(first_ctx)}; decode: {_precision(first)}",
                "method": "aiconfigurator.cli.api.cli_estimate, database_mode SILICON: prefill = ttft of "
                          "static_ctx (batch_size, isl = prompt, osl 1); decode = tpot of static_gen "
                          "(batch_size, isl = context, osl 2)",
                "note": ["the database may fill shapes it lacks from sibling versions (its shared layer); "
                         "the hash covers this version's files only"]})
