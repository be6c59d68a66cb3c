"""The scenario's service-time model: roofline step times, measured tables, or fixed times.

One of the three is a scenario's ``perf`` (a discriminated union on ``kind``, default roofline).
:mod:`qmodel.scenario` re-exports these models; the step times they describe come from
:mod:`qmodel.perf`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, field_validator

from qmodel.scenario_base import MAX_OVERHEAD_S, MIN_EFFICIENCY, Strict
from qmodel.units import Real, Seconds

__all__ = ["RooflinePerf", "TablePerf", "FixedPerf", "PerfModel"]


class RooflinePerf(Strict):
    """Roofline step times from catalog specs and the shared efficiency curves (catalog/efficiency.toml).

    ``efficiency: curves`` (default) runs each kernel at its architecture's measured efficiency
    (qmodel.perf.efficiency); a factor given here replaces that curve's number (``mfu`` the
    saturated GEMM efficiency, ``mbu`` the HBM efficiencies, ``attention_efficiency`` scales the
    attention peak, ``comm_efficiency`` the all-reduce, the overheads the per-step constants).
    ``efficiency: constants`` is the roofline before the curves: factors not given take mfu 0.55,
    mbu 0.75, overheads 10 / 4 ms, comm_efficiency 0.7, attention_efficiency 1.
    """

    kind: Literal["roofline"] = "roofline"
    efficiency: Literal["curves", "constants"] = Field(
        default="curves", description="curves: measured per-architecture kernel efficiencies; constants: fixed factors")
    mfu: Real | None = Field(default=None, ge=MIN_EFFICIENCY, le=1,
                             description="achieved fraction of dense tensor FLOP/s in large GEMMs (default: the curve's)")
    mbu: Real | None = Field(default=None, ge=MIN_EFFICIENCY, le=1,
                             description="achieved fraction of memory bandwidth streaming weights/KV (default: the curve's)")
    prefill_overhead_s: Seconds | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S,
                                               description="per prefill step beyond the kernels (default: the curve's)")
    decode_overhead_s: Seconds | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S,
                                              description="per decode step beyond the kernels (default: the curve's)")
    comm_efficiency: Real | None = Field(default=None, ge=MIN_EFFICIENCY, le=1,
                                         description="achieved fraction of intra-node link bandwidth for TP all-reduce")
    compute_dtype: str | None = Field(default=None, description="default: the model's weight dtype")
    attention_efficiency: Real | None = Field(default=None, ge=MIN_EFFICIENCY, le=1,
                                              description="multiplies the attention efficiency (calibration fits it)")
    prefill_per_request_s: Seconds = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S, description="time per request in a prefill batch beyond its tokens (calibration fits it)")

    @field_validator("compute_dtype")
    @classmethod
    def _known_dtype(cls, v: str | None) -> str | None:
        """An empty or unknown dtype is an error here, not a silent fallback to the weight dtype."""
        if v is not None:
            from qmodel.units import dtype_bits

            dtype_bits(v, "perf.compute_dtype")
        return v


class TablePerf(Strict):
    """Measured step times from a table (splitwise-sim CSV, DistServe profiler JSON, or qmodel CSV).

    Tables are measured at pp = 1; a pool with ``pp > 1`` runs the table as a pipeline
    (:mod:`qmodel.perf.table_pipeline`: layer share x (time - measured_overhead_s) +
    measured_overhead_s + the activation send over ``pipeline_link``), and ``per_batch_overhead_s``
    is added to every step time either way.
    """

    kind: Literal["table"] = "table"
    path: str
    format: Literal["auto", "splitwise", "distserve", "qmodel"] = "auto"
    model_key: str | None = Field(default=None, description="model name inside the table if it differs")
    hardware_key: str | None = None
    per_batch_overhead_s: Seconds = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S,
                                          description="added to every prefill batch and decode step (your engine vs the measured one)")
    measured_overhead_s: Seconds = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S,
                                         description="per-step overhead inside the measured times; with pp > 1 each stage pays it whole")
    pipeline_link: str | None = Field(default=None, description="link between pipeline stages (catalog name or bandwidth); "
                                                                "default: the GPU's intra-node link")


class FixedPerf(Strict):
    """Constant prefill time per request and constant decode step (teaching, closed-form checks)."""

    kind: Literal["fixed"] = "fixed"
    prefill_s: Seconds = Field(gt=0, le=3600)
    decode_step_s: Seconds = Field(gt=0, le=60)


PerfModel = Annotated[Union[RooflinePerf, TablePerf, FixedPerf], Field(discriminator="kind")]
