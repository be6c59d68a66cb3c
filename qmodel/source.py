"""One way in for the library's verbs: a scenario given as a parsed :class:`~qmodel.scenario.Scenario`
or as the path of a scenario file (YAML/TOML/JSON), so ``qmodel.solve``, ``qmodel.goodput``,
``qmodel.compare_topologies`` and ``qmodel.plan`` all accept either."""

from __future__ import annotations

from pathlib import Path

from qmodel.errors import InputError
from qmodel.scenario import Scenario, load_scenario

__all__ = ["ScenarioLike", "as_scenario"]

ScenarioLike = Scenario | str | Path


def as_scenario(scenario: ScenarioLike) -> Scenario:
    """The scenario itself, or the one loaded (and validated) from the file at that path."""
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    raise InputError("scenario", type(scenario).__name__, "a Scenario or the path of a scenario file")
