"""Tensor/pipeline parallel layout of one instance: which splits are legal and how KV shards.

The rule (the one vLLM and TensorRT-LLM apply):

* **query heads**: ``tp`` must divide ``num_heads`` (each rank owns whole heads);
* **KV heads** (GQA/MQA): if ``num_kv_heads >= tp``, ``tp`` must divide ``num_kv_heads``; if
  ``num_kv_heads < tp``, ``num_kv_heads`` must divide ``tp`` and every KV head is *replicated* on
  ``tp / num_kv_heads`` ranks (so KV memory per GPU stops shrinking once tp exceeds the KV heads);
* **MLA**: the latent KV is shared by all heads and is replicated on every TP rank (vLLM/SGLang
  without data-parallel attention), so only the query-head rule applies and the KV per GPU does
  not shrink with tp at all;
* ``pp`` must not exceed ``layers``; layers are split as evenly as possible, and the busiest stage
  (``ceil(layers / pp)`` layers) sets the pace.

Violations raise :class:`~qmodel.errors.InputError` naming ``<field_prefix>.tp`` or ``.pp``, so a
message says which pool is wrong (``deployment.prefill.tp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qmodel.errors import InputError
from qmodel.specs import ModelSpec

__all__ = ["Parallelism", "check_parallelism"]


@dataclass(frozen=True)
class Parallelism:
    """A validated ``tp x pp`` layout for one model."""

    tp: int
    pp: int
    #: ranks over which one token's KV is split (1 for MLA; min(tp, kv_heads) for GQA/MHA)
    kv_shards_tp: int
    #: layers of the busiest pipeline stage
    layers_per_stage: int
    #: layers of the whole model
    layers_total: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def stage_fraction(self) -> float:
        """Fraction of the model's layers on the busiest stage (1 when pp = 1)."""
        return self.layers_per_stage / self.layers_total


def check_parallelism(model: ModelSpec, tp: int, pp: int = 1, field_prefix: str = "deployment") -> Parallelism:
    """Validate ``tp``/``pp`` for ``model`` and return the layout (see the module docstring for the rule)."""
    tp_field, pp_field = f"{field_prefix}.tp", f"{field_prefix}.pp"
    if not isinstance(tp, int) or tp < 1:
        raise InputError(tp_field, tp, "a positive integer")
    if not isinstance(pp, int) or pp < 1:
        raise InputError(pp_field, pp, "a positive integer")
    if model.num_heads % tp:
        allowed = [d for d in range(1, model.num_heads + 1) if model.num_heads % d == 0 and d <= 64]
        raise InputError(tp_field, tp, f"{model.name} has {model.num_heads} query heads; tp must divide them "
                                       f"(allowed: {', '.join(map(str, allowed))})")
    if model.mla is not None:
        kv_shards = 1
    else:
        kvh = model.num_kv_heads
        if kvh >= tp and kvh % tp:
            raise InputError(tp_field, tp, f"{model.name} has {kvh} KV heads; tp must divide them, "
                                           f"or be a multiple of them (KV heads are then replicated)")
        if kvh < tp and tp % kvh:
            raise InputError(tp_field, tp, f"{model.name} has {kvh} KV heads; a tp above that must be a "
                                           f"multiple of {kvh} so each KV head is replicated evenly")
        kv_shards = min(tp, kvh)
    if pp > model.layers:
        raise InputError(pp_field, pp, f"{model.name} has {model.layers} layers; pp must be at most that")
    return Parallelism(tp=tp, pp=pp, kv_shards_tp=kv_shards,
                       layers_per_stage=math.ceil(model.layers / pp), layers_total=model.layers)
