r"""A step-time table measured at (tp, pp = 1) run as a pp-stage pipeline, and the table's per-batch constant.

The model (DistServe's simulator and Vidur scale a pp = 1 profile the same way)::

    stage(x) = f * max(t(x) - c, 0) + c + send(x) + d          (pp > 1)
    stage(x) = t(x) + d                                         (pp = 1)
    f        = ceil(L / pp) / L                                 busiest stage's share of the L layers
    send(x)  = tokens(x) * hidden * act_bytes / (link_bw * link_efficiency) + link_latency

``t(x)`` is the table's whole-model time of batch ``x`` (a prefill batch or a decode step);
``tokens`` is the prompt tokens computed (prefill) or the sequences (decode), each handing one
hidden-state vector of ``act_bytes = max(weight bits, 16) / 8`` bytes to the next stage;
``c = measured_overhead_s`` is the part of every measured step that is per-step overhead
(scheduler, sampling, kernel launches) and not per-layer work, so a stage pays it whole, not
scaled by ``f``; ``d = per_batch_overhead_s`` is added to every prefill batch and decode step
(the user's engine is not the measured one). An empty batch takes 0 s.

**What the returned time means** is the same as for :class:`~qmodel.perf.roofline.RooflineModel`:
the *stage* time. With pp micro-batches in flight a pipeline accepts a new batch every stage
time (the throughput-equivalent service time the stations and the replay consume, with no special
case for pp); one batch's latency through the instance is pp stage times
(:meth:`ServiceTimeModel.pipeline_latency_s`). KV and weights are split by layer in
:mod:`qmodel.perf.memory` (``stage_fraction``) for every kind of perf model, so each stage holds the
KV of its own layers only and the KV capacity per GPU rises with pp.

**Why ``c`` is declared, not fitted.** A table's intercept (its time extrapolated to an empty batch)
is mostly weight streaming, which *is* per layer: DistServe's OPT-13B TP1 decode fit on A100
(``decoding_smallbs``) has an intercept of 19.9 ms, of which reading the 25.7 GB of fp16 weights
at 2.04 TB/s takes 12.6 ms alone. Taking the intercept as unscaled overhead would leave a decode
stage of that model at batch 1 barely faster than the whole model, whatever pp. The engine's own
per-step overhead is not separable from the table, so it is a declared field: default 0
(everything measured scales with the layers, as in DistServe's simulator, whose ``pp_const`` is
0); Vidur keeps its CPU-overhead profiles (schedule, sampler, input preparation) unscaled, which
is what ``c`` stands for. It must not exceed the table's fastest step.

The send uses ``perf.pipeline_link`` (a catalog link or a bandwidth string), by default the GPU's
own intra-node link (:attr:`GPUSpec.intra_node_link`): stages on one node. Name an inter-node link
(``ib-ndr-400``) for stages on different nodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from qmodel.errors import InputError
from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel
from qmodel.perf.parallel import Parallelism, check_parallelism
from qmodel.perf.table_interp import SCALAR_TYPES, TablePoint
from qmodel.specs import GPUSpec, LinkSpec, ModelSpec
from qmodel.units import dtype_bits

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["PipelinedTableModel", "stage_link", "check_overhead", "check_measured_overhead"]


def check_overhead(name: str, value: object) -> float:
    """``perf.<name>`` as seconds: a non-negative finite number, else one InputError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (np.isfinite(value) and value >= 0):
        raise InputError(f"perf.{name}", value, "a non-negative finite time in seconds")
    return float(value)


def check_measured_overhead(table: ServiceTimeModel, measured_overhead_s: float) -> None:
    """``perf.measured_overhead_s`` is part of every measured step, so it cannot exceed the table's
    fastest point (:meth:`points`, which every table model has); one InputError otherwise."""
    fastest = min(p.time_s for p in table.points())  # type: ignore[attr-defined]
    if measured_overhead_s > fastest:
        raise InputError("perf.measured_overhead_s", measured_overhead_s,
                         f"at most the table's fastest step ({fastest:.6g} s): it is the part of each measured "
                         "step that is per-step overhead")


def stage_link(gpu: GPUSpec, link: str | None = None, field: str = "perf.pipeline_link") -> LinkSpec:
    """The link carrying the inter-stage send: ``link`` (a catalog name or a bandwidth string), else
    the GPU's intra-node link from the catalog, else an anonymous link at its intra-node bandwidth."""
    from qmodel.registry import load_catalog
    from qmodel.specs import anonymous_link

    if link is not None:
        return load_catalog().link(link, field)
    if gpu.intra_node_link is not None:
        return load_catalog().link(gpu.intra_node_link, f"{gpu.name}.intra_node_link")
    return anonymous_link(f"{gpu.intra_node_bandwidth_bytes_per_s} B/s", field)


class PipelinedTableModel(ServiceTimeModel):
    """A measured table (any table model) as the stage time of a ``tp x pp`` instance, plus the
    per-batch constant; the formula and its reasons are in the module docstring."""

    def __init__(self, base: ServiceTimeModel, model: ModelSpec, tp: int, pp: int, *, link: LinkSpec,
                 measured_overhead_s: float = 0.0, per_batch_overhead_s: float = 0.0,
                 field_prefix: str = "deployment") -> None:
        self.measured_overhead_s = check_overhead("measured_overhead_s", measured_overhead_s)
        self.per_batch_overhead_s = check_overhead("per_batch_overhead_s", per_batch_overhead_s)
        self.base = base
        self.kind = base.kind
        self.layout: Parallelism = check_parallelism(model, tp, pp, field_prefix)
        self.tp, self.pp = tp, pp
        self.link = link
        self.stage_fraction = self.layout.stage_fraction
        check_measured_overhead(base, self.measured_overhead_s)
        act_bytes = max(dtype_bits(model.dtype), 16.0) / 8.0
        self._pipelined = pp > 1
        #: seconds per token handed to the next stage, and per send (0 when pp = 1)
        self.send_s_per_token = model.hidden_size * act_bytes / link.effective_bandwidth_bytes_per_s if pp > 1 else 0.0
        self.send_latency_s = float(link.latency_s) if pp > 1 else 0.0

    # ---- the two step times --------------------------------------------------------------
    def _stage(self, t: float, tokens: float) -> float:
        if self._pipelined:
            c = self.measured_overhead_s
            t = self.stage_fraction * max(t - c, 0.0) + c + (self.send_s_per_token * tokens + self.send_latency_s)
        return t + self.per_batch_overhead_s

    def _stage_array(self, t: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        if self._pipelined:
            c = self.measured_overhead_s
            t = self.stage_fraction * np.maximum(t - c, 0.0) + c + (self.send_s_per_token * tokens + self.send_latency_s)
        return t + self.per_batch_overhead_s

    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        t = self.base.prefill_time_s(sum_tokens, sum_sq_tokens, n_requests)
        if type(t) in SCALAR_TYPES and type(sum_tokens) in SCALAR_TYPES:
            return self._stage(t, float(sum_tokens)) if sum_tokens > 0 else 0.0
        tok, tt = np.broadcast_arrays(np.asarray(sum_tokens, dtype=float), np.asarray(t, dtype=float))
        out = np.where(tok > 0, self._stage_array(tt, tok), 0.0)  # an empty batch takes no time
        return float(out) if out.ndim == 0 else out

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        t = self.base.decode_step_time_s(n_seqs, sum_context_tokens)
        if type(t) in SCALAR_TYPES and type(n_seqs) in SCALAR_TYPES:
            return self._stage(t, float(n_seqs)) if n_seqs > 0 else 0.0
        n, tt = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(t, dtype=float))
        out = np.where(n > 0, self._stage_array(tt, n), 0.0)  # an empty batch takes no time
        return float(out) if out.ndim == 0 else out

    # ---- calibration support and identity ---------------------------------------------------
    def points(self) -> list[TablePoint]:
        """The table's points with this model's (stage) times: a roofline calibrated at the same
        (tp, pp) is then fitted to what this model answers."""
        out = []
        for p in self.base.points():  # type: ignore[attr-defined]
            if p.phase == "prefill":
                t = self.prefill_time_s(float(p.sum_tokens), float(p.sum_sq_tokens), float(p.n))
            else:
                t = self.decode_step_time_s(float(p.n), float(p.sum_context_tokens))
            out.append(dataclasses.replace(p, time_s=float(t)))
        return out

    def params(self) -> dict[str, object]:
        return {"tp": self.tp, "pp": self.pp, "stage_fraction": self.stage_fraction,
                "measured_overhead_s": self.measured_overhead_s, "per_batch_overhead_s": self.per_batch_overhead_s,
                "pipeline_link": self.link.name if self.pp > 1 else None,
                "send_s_per_token": self.send_s_per_token, "send_latency_s": self.send_latency_s}

    @property
    def fingerprint(self) -> str:
        blob = json.dumps({"table_sha256": self.base.fingerprint, **self.params()}, sort_keys=True,
                          separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> dict[str, object]:
        return {**self.base.describe(), "table_sha256": self.base.fingerprint, "sha256": self.fingerprint,
                **self.params()}
