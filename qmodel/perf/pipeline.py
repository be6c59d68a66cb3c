r"""A pp-deep pipeline instance as the stations and the replay see it: one definition of what pp does.

The stage models (:class:`~qmodel.perf.roofline.RooflineModel`,
:class:`~qmodel.perf.table_pipeline.PipelinedTableModel`, or a fixed model whose declared times are
taken as stage times) answer the *stage* time: the busiest stage's share of a batch plus its
inter-stage send. :func:`pipeline_instance` wraps any of them, for ``pp > 1``, into the instance
model every consumer reads (qmodel/build.py applies it to every pool; docs/methods.md, "Pipeline
parallelism")::

    prefill(T, Q, k)   = stage_prefill(T, Q, k)                       engine busy (service time)
    prefill exit       = pp * stage_prefill(T, Q, k)                  first token / KV leave
    decode(n, S)       = pp * stage_decode(n / m, S / m),  m = min(pp, max(n, 1))

**Prefill.** A batch enters the first stage and the instance accepts the next batch one stage
time later (pp micro-batches in flight): the server is busy for one stage time, so that is the
service time of the queue. The batch itself leaves the last stage pp stage times after it
entered, so the request's TTFT (and the start of its KV's life on the link) holds
``(pp - 1)`` further stage times of its own batch: :attr:`prefill_exit_stages` = pp tells the
prefill station and the replay so (:meth:`ServiceTimeModel.prefill_exit_s`).

**Decode.** vLLM and TensorRT-LLM run pp decode micro-batches (virtual engines) in flight: the n
running sequences are split into ``m = min(pp, n)`` micro-batches of n/m sequences each; a
sequence advances one token when its micro-batch has passed all pp stages, i.e. every pp stage
times of a micro-batch of n/m. The decode "step" a sequence sees is therefore
``pp * stage(n/m, S/m)`` and the instance makes n tokens per such step. With fewer sequences
than stages (n < pp) the pipeline has a bubble: each sequence is a micro-batch of one and the
stages it is not in idle (m = n). Micro-batches are taken as equal (n/m may be fractional; an engine's
integer micro-batches differ by at most one sequence, and the replay reads this same formula);
uneven stages are the stage model's ``ceil(layers/pp)`` busiest stage.

At pp = 1 :func:`pipeline_instance` returns the stage model itself, so every pp = 1 result is
bit-identical to the unwrapped model's.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from qmodel.perf.base import ArrayOrFloat, ServiceTimeModel, SCALAR_TYPES

if TYPE_CHECKING:  # annotations only: numpy.typing stays unimported at run time (a cold CLI start)
    from numpy.typing import ArrayLike

__all__ = ["PipelineInstance", "pipeline_instance", "stage_model"]



class PipelineInstance(ServiceTimeModel):
    """A ``pp``-stage instance around a stage-time model (formulas in the module docstring)."""

    def __init__(self, stage: ServiceTimeModel, pp: int) -> None:
        if isinstance(pp, bool) or not isinstance(pp, int) or pp < 2:
            raise ValueError(f"PipelineInstance needs pp >= 2, got {pp!r} (pp = 1 is the stage model itself)")
        if isinstance(stage, PipelineInstance):
            raise ValueError("the stage model is already a pipeline instance")
        self.stage = stage
        self.pp = pp
        self.prefill_exit_stages = pp
        self.kind = stage.kind

    def prefill_time_s(self, sum_tokens: ArrayLike, sum_sq_tokens: ArrayLike, n_requests: ArrayLike) -> ArrayOrFloat:
        """The stage time: how long the instance is busy with the batch (the queue's service time)."""
        return self.stage.prefill_time_s(sum_tokens, sum_sq_tokens, n_requests)

    def decode_step_time_s(self, n_seqs: ArrayLike, sum_context_tokens: ArrayLike) -> ArrayOrFloat:
        """pp stage times of a micro-batch of n/m sequences, m = min(pp, max(n, 1)); 0 for n = 0."""
        pp = float(self.pp)
        if type(n_seqs) in SCALAR_TYPES and type(sum_context_tokens) in SCALAR_TYPES:
            if n_seqs <= 0:
                return 0.0
            m = min(pp, max(float(n_seqs), 1.0))
            return pp * float(self.stage.decode_step_time_s(n_seqs / m, sum_context_tokens / m))
        n, s = np.broadcast_arrays(np.asarray(n_seqs, dtype=float), np.asarray(sum_context_tokens, dtype=float))
        m = np.clip(n, 1.0, pp)
        t = pp * np.asarray(self.stage.decode_step_time_s(n / m, s / m), dtype=float)
        out = np.where(n > 0, t, 0.0)
        return float(out) if out.ndim == 0 else out

    @property
    def fingerprint(self) -> str:
        blob = json.dumps({"pipeline_instance": self.pp, "stage_sha256": self.stage.fingerprint}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def describe(self) -> dict[str, object]:
        return {**self.stage.describe(), "stage_sha256": self.stage.fingerprint, "sha256": self.fingerprint,
                "pipeline_stages": self.pp, "decode_micro_batches": self.pp}


def pipeline_instance(stage: ServiceTimeModel, pp: int) -> ServiceTimeModel:
    """The instance model of a pool with ``pp`` stages: ``stage`` itself at pp = 1, else
    :class:`PipelineInstance` around it."""
    return stage if pp == 1 else PipelineInstance(stage, pp)


def stage_model(service: ServiceTimeModel) -> ServiceTimeModel:
    """The stage-time model inside a pipeline instance (``service`` itself when it is none): what a
    consumer that takes a prefill batch's first token after one stage time reads (the colocated
    station's bulk-service bound, matching its gated form and the replay's colocated engine)."""
    return service.stage if isinstance(service, PipelineInstance) else service
