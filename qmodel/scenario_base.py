"""The scenario schema's base model: :class:`Strict` and the numeric domains its fields share.

Split from :mod:`qmodel.scenario` (which re-exports everything) so that the deployment models
(:mod:`qmodel.scenario_deployment`) and the rest of the schema build on one base.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer

__all__ = ["MAX_OVERHEAD_S", "MAX_PRICE_USD_PER_GPU_HOUR", "MAX_RATE_PER_S", "MAX_TOKENS", "MIN_EFFICIENCY", "Strict"]


class Strict(BaseModel):
    """Scenario parts: unknown keys are errors (a typo must never be silently ignored).

    Every number has a declared domain (``Field`` bounds): the realistic range of the quantity, so
    that a value no deployment has (an MBU of 1e-300, a 9e18 s overhead, a 1e30-token prompt) is
    refused here, naming the field, instead of overflowing inside a station. Numbers are
    :data:`~qmodel.units.Real` / :data:`~qmodel.units.Count`: booleans, NaN and inf are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False,
                              defer_build=True)  # schema built on first use: a fresh process pays only for the models it validates

    #: optional fields added after scenarios were first hashed: left out of the dump while unset, so an
    #: unchanged scenario keeps its canonical JSON and its sha256 (:func:`qmodel.scenario.scenario_sha256`)
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset_additions(self, handler: Any) -> Any:
        out = handler(self)
        for name in self.OMIT_WHEN_NONE:
            if getattr(self, name) is None and isinstance(out, dict):
                out.pop(name, None)
        return out


#: Domains shared by several fields (see :class:`Strict`): the largest prompt/output/budget in tokens
#: (10M, beyond any model's context), the largest arrival rate, the smallest efficiency factor
#: (1% of peak: no engine runs slower and still serves) and the largest fixed overhead per step.
MAX_TOKENS = 10_000_000
MAX_RATE_PER_S = 1e9
MIN_EFFICIENCY = 0.01
MAX_OVERHEAD_S = 10.0
#: the largest price a scenario may give one GPU-hour (no accelerator rents for more)
MAX_PRICE_USD_PER_GPU_HOUR = 1000.0
