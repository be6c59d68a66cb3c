"""qmodel: queueing-theory capacity planning for LLM serving.

The data path: catalog -> scenario -> service times -> stations -> result -> goodput/plan -> CLI/TUI.

Importing ``qmodel`` is light: the heavy pieces (scipy.stats, sympy, Textual, the replay) load on
first use of the names below.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it; resolved lazily by __getattr__ so `import qmodel` stays fast.
_EXPORTS: dict[str, str] = {
    # scenario schema
    "Scenario": "qmodel.scenario",
    "Workload": "qmodel.scenario",
    "SLO": "qmodel.scenario",
    "PoissonArrivals": "qmodel.scenario",
    "GammaArrivals": "qmodel.scenario",
    "TraceArrivals": "qmodel.scenario",
    "ClosedArrivals": "qmodel.scenario",
    "FixedLengths": "qmodel.scenario",
    "LognormalLengths": "qmodel.scenario",
    "EmpiricalLengths": "qmodel.scenario",
    "PresetLengths": "qmodel.scenario",
    "PrefillPool": "qmodel.scenario",
    "DecodePool": "qmodel.scenario",
    "ColocatedDeployment": "qmodel.scenario",
    "ChunkedDeployment": "qmodel.scenario",
    "DisaggregatedDeployment": "qmodel.scenario",
    "RooflinePerf": "qmodel.scenario",
    "TablePerf": "qmodel.scenario",
    "FixedPerf": "qmodel.scenario",
    "load_scenario": "qmodel.scenario",
    "parse_scenario": "qmodel.scenario",
    # catalog
    "ModelSpec": "qmodel.specs",
    "GPUSpec": "qmodel.specs",
    "LinkSpec": "qmodel.specs",
    "load_catalog": "qmodel.registry",
    # answers
    "Result": "qmodel.result",
    "Goodput": "qmodel.result",
    "solve": "qmodel.solver",
    "goodput": "qmodel.goodput",
    "plan": "qmodel.planner",
    "compare_topologies": "qmodel.compare",
    "Comparison": "qmodel.compare",
    "as_scenario": "qmodel.source",
    "PlanResult": "qmodel.planner",
    # errors
    "QmodelError": "qmodel.errors",
    "InputError": "qmodel.errors",
    "CatalogError": "qmodel.errors",
    "DataError": "qmodel.errors",
    "UnstableError": "qmodel.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


class _Package(types.ModuleType):
    """The package's module type: ``goodput`` names both a submodule and its verb, and loading the
    submodule (by any import of it) sets the package attribute to the module; this keeps the verb
    there instead, so ``qmodel.goodput`` is the function without importing the submodule (and
    pydantic with it) at ``import qmodel``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "goodput" and isinstance(value, types.ModuleType):
            value = value.goodput
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'qmodel' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from qmodel.solver import solve
    from qmodel.errors import CatalogError, DataError, InputError, QmodelError, UnstableError
    from qmodel.compare import Comparison, compare_topologies
    from qmodel.planner import PlanResult, plan
    from qmodel.registry import load_catalog
    from qmodel.result import Goodput, Result
    from qmodel.scenario import *  # noqa: F403
    from qmodel.source import as_scenario
    from qmodel.specs import GPUSpec, LinkSpec, ModelSpec
