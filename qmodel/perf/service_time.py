"""Build the ServiceTimeModel a scenario asks for: ``service_model(perf, model, gpu, tp, pp)``."""

from __future__ import annotations

from pathlib import Path

from qmodel.errors import InputError
from qmodel.perf.base import ServiceTimeModel
from qmodel.perf.fixed import FixedModel
from qmodel.perf.parallel import check_parallelism
from qmodel.perf.roofline import RooflineModel
from qmodel.perf.table_pipeline import PipelinedTableModel, check_measured_overhead, check_overhead, stage_link
from qmodel.perf.table_loaders import (
    DISTSERVE_HARDWARE,
    DISTSERVE_MODELS,
    SPLITWISE_HARDWARE,
    SPLITWISE_MODELS,
    detect_format,
    load_distserve,
    load_qmodel_csv,
    load_splitwise,
)
from qmodel.scenario import FixedPerf, PerfModel, RooflinePerf, TablePerf
from qmodel.settings import resolve_data_path
from qmodel.specs import GPUSpec, ModelSpec

__all__ = ["service_model", "table_model"]


def service_model(perf: PerfModel, model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1,
                  field_prefix: str = "deployment") -> ServiceTimeModel:
    """The step-time model of one instance (``tp x pp`` GPUs of ``gpu`` running ``model``).

    ``field_prefix`` names the pool in error messages (``deployment.prefill`` -> an invalid tp is
    reported as ``deployment.prefill.tp``). The TP/PP rule is in :mod:`qmodel.perf.parallel`; it is
    checked for every kind of perf model, so a fixed or table model cannot hide an impossible layout.
    """
    check_parallelism(model, tp, pp, field_prefix)
    if isinstance(perf, RooflinePerf):
        return RooflineModel(model, gpu, tp, pp, mfu=perf.mfu, mbu=perf.mbu,
                             prefill_overhead_s=perf.prefill_overhead_s, decode_overhead_s=perf.decode_overhead_s,
                             comm_efficiency=perf.comm_efficiency, compute_dtype=perf.compute_dtype,
                             attention_efficiency=perf.attention_efficiency,
                             prefill_per_request_s=perf.prefill_per_request_s,
                             curves="catalog" if perf.efficiency == "curves" else None, field_prefix=field_prefix)
    if isinstance(perf, FixedPerf):
        return FixedModel(perf.prefill_s, perf.decode_step_s)
    if isinstance(perf, TablePerf):
        return table_model(perf.path, model, gpu, tp, pp, fmt=perf.format, model_key=perf.model_key,
                           hardware_key=perf.hardware_key, measured_overhead_s=perf.measured_overhead_s,
                           per_batch_overhead_s=perf.per_batch_overhead_s, pipeline_link=perf.pipeline_link,
                           field_prefix=field_prefix)
    raise InputError("perf.kind", getattr(perf, "kind", perf), "one of 'roofline', 'table', 'fixed'")


def table_model(path: str | Path, model: ModelSpec, gpu: GPUSpec, tp: int, pp: int = 1, *, fmt: str = "auto",
                model_key: str | None = None, hardware_key: str | None = None, measured_overhead_s: float = 0.0,
                per_batch_overhead_s: float = 0.0, pipeline_link: str | None = None,
                field_prefix: str = "deployment") -> ServiceTimeModel:
    """A measured-table model for (model, gpu, tp, pp); catalog names map to the table's own keys.

    Tables are measured at pp = 1: the table of (model, gpu, tp) is read, and for ``pp > 1`` or a
    ``per_batch_overhead_s`` it is wrapped in :class:`~qmodel.perf.table_pipeline.PipelinedTableModel`
    (stage time = layer share x (table - measured_overhead_s) + measured_overhead_s + inter-stage
    send over ``pipeline_link`` + per_batch_overhead_s). At pp = 1 with no per-batch constant the
    table model itself is returned, so its times are the table's bit for bit.
    A table measured on another GPU than the pool's is refused unless ``hardware_key`` names the
    table's hardware explicitly (a deliberate choice, e.g. the power-capped H100 rows).
    """
    check_parallelism(model, tp, pp, field_prefix)
    check_overhead("measured_overhead_s", measured_overhead_s)
    check_overhead("per_batch_overhead_s", per_batch_overhead_s)
    base = _read_table(resolve_data_path(str(path)), model, gpu, tp, fmt, model_key, hardware_key, field_prefix)
    if pp == 1 and per_batch_overhead_s == 0 and pipeline_link is None:
        check_measured_overhead(base, measured_overhead_s)  # unused at pp = 1, but never silently wrong
        return base
    return PipelinedTableModel(base, model, tp, pp, link=stage_link(gpu, pipeline_link),
                               measured_overhead_s=measured_overhead_s, per_batch_overhead_s=per_batch_overhead_s,
                               field_prefix=field_prefix)


def _read_table(p: Path, model: ModelSpec, gpu: GPUSpec, tp: int, fmt: str, model_key: str | None,
                hardware_key: str | None, field_prefix: str) -> ServiceTimeModel:
    """The pp = 1 table model of (model, gpu, tp) in file ``p``."""
    fmt = detect_format(p) if fmt == "auto" else fmt
    if fmt == "splitwise":
        mk = model_key or SPLITWISE_MODELS.get(model.name)
        if mk is None:
            raise InputError("perf.model_key", model.name, f"splitwise-sim measures {', '.join(sorted(SPLITWISE_MODELS))}; "
                                                           "set perf.model_key to use another model's rows")
        hk = hardware_key or SPLITWISE_HARDWARE.get(gpu.name)
        if hk is None:
            raise InputError("perf.hardware_key", gpu.name, f"splitwise-sim measures GPUs {', '.join(sorted(SPLITWISE_HARDWARE))}; "
                                                            "set perf.hardware_key to use another GPU's rows")
        return load_splitwise(p, mk, hk, tp, field_prefix)
    if fmt == "distserve":
        mk = model_key or DISTSERVE_MODELS.get(model.name)
        if mk is None:
            raise InputError("perf.model_key", model.name, f"DistServe profiles {', '.join(sorted(DISTSERVE_MODELS))}; "
                                                           "set perf.model_key to use another model's entry")
        tag = next((t for t in DISTSERVE_HARDWARE if t in p.name), None)
        if hardware_key is not None and hardware_key != tag and (tag is not None or hardware_key not in DISTSERVE_HARDWARE):
            # DistServe files hold one GPU's profile: a key can only confirm it, never select other rows.
            raise InputError("perf.hardware_key", hardware_key,
                             f"{p.name} is DistServe's profile of '{tag}'; use that key or none" if tag else
                             f"DistServe profiles carry no hardware rows; known tags: {', '.join(sorted(DISTSERVE_HARDWARE))}")
        if hardware_key is None and tag is not None and DISTSERVE_HARDWARE[tag] != gpu.name:
            raise InputError("perf.hardware_key", gpu.name, f"{p.name} was profiled on {DISTSERVE_HARDWARE[tag]}; "
                                                            f"set perf.hardware_key = '{tag}' to use it anyway")
        return load_distserve(p, mk, tp, field_prefix)
    if fmt == "qmodel":
        # Files without model/hardware columns are not filtered; files with them default to the catalog names.
        return load_qmodel_csv(p, tp, model_key=model_key or model.name, hardware_key=hardware_key or gpu.name,
                               field_prefix=field_prefix)
    raise InputError("perf.format", fmt, "one of 'auto', 'splitwise', 'distserve', 'qmodel'")
