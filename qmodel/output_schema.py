"""The JSON documents qmodel prints: one pydantic model per verb, one schema version, one JSON Schema.

Every ``--json`` document is an object whose first key is ``schema_version`` (:data:`SCHEMA_VERSION`,
raised whenever a key is renamed or removed or its type changes; adding a key keeps it). Keys carry their unit (``_s``
seconds, ``_per_s`` per second, ``_bytes``, ``_usd``), values are SI. A nested latency summary is
``{"mean_s", "p50_s", "p90_s", "p99_s"}`` (:class:`qmodel.result.DistSummary`); a flat table (sweep,
plan, their CSV) spells the same figure with the parent's name in front: ``ttft.p90_s`` in ``solve``
is ``ttft_p90_s`` in ``sweep`` and ``plan``. Attainments and utilizations are fractions in [0, 1].

:func:`json_schema` builds the JSON Schema (draft 2020-12) of every modelled document from the
pydantic models themselves; ``docs/output-schema.json`` is its output (``python -m
qmodel.output_schema > docs/output-schema.json``) and a test checks both that the file is current and
that each verb's output validates against it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SCHEMA_VERSION", "DOCUMENTS", "LOOSE", "document_models", "json_schema"]

#: version of the JSON output documents (2: units in every key, e.g. ttft.p90 -> ttft.p90_s; 3: solve's
#: ``validity`` is an object, the error band per metric and the envelope flag, where it was a sentence)
SCHEMA_VERSION = 3

#: verb -> the models its ``--json`` document may be, as "module:Class"
DOCUMENTS: dict[str, tuple[str, ...]] = {
    "solve": ("qmodel.output_schema:SolveDocument",),
    "goodput": ("qmodel.result:Goodput",),
    "sweep": ("qmodel.result:Sweep", "qmodel.result:ConcurrencySweep"),
    "compare": ("qmodel.compare:Comparison",),
    "plan": ("qmodel.planner.plan_result:PlanResult", "qmodel.planner.plan_result:ScheduleResult"),
    "replay": ("qmodel.validation.replay_result:ReplayResult",),
}

#: verbs whose JSON carries ``schema_version`` but whose body is not modelled yet (free-form objects)
LOOSE = ("validate", "catalog", "trace", "calibrate")


def _load(ref: str) -> Any:
    module, name = ref.split(":")
    if module == "qmodel.output_schema":
        return _solve_document()
    return getattr(importlib.import_module(module), name)


def _solve_document() -> Any:
    """``qmodel solve --json``: the result, plus the closed loop's throughput (a closed scenario or
    ``--concurrency``), the replay comparison (``--check``) and the closed forms (``--explain``)
    when there or asked for."""
    from pydantic import ConfigDict

    from qmodel.result import ClosedLoop, Result
    from qmodel.validation.replay_check import CheckReport

    class SolveDocument(Result):
        model_config = ConfigDict(frozen=True, extra="forbid")
        closed_loop: ClosedLoop | None = None
        check: CheckReport | None = None
        explain: list[str] | None = None

    return SolveDocument


def document_models() -> dict[str, tuple[Any, ...]]:
    """verb -> its document model classes."""
    return {verb: tuple(_load(r) for r in refs) for verb, refs in DOCUMENTS.items()}


def json_schema() -> dict[str, Any]:
    """One JSON Schema with a definition per verb's document (``#/$defs/<verb>``), each requiring
    ``schema_version`` equal to :data:`SCHEMA_VERSION`; shared parts (a latency summary, a station)
    are defined once."""
    from pydantic.json_schema import models_json_schema

    models = document_models()
    flat = [(m, "serialization") for ms in models.values() for m in ms]
    keys, top = models_json_schema(flat, by_alias=True, ref_template="#/$defs/{model}")
    defs: dict[str, Any] = dict(top.get("$defs", {}))
    version = {"const": SCHEMA_VERSION, "description": "version of this document's keys"}
    for verb, ms in models.items():
        refs = [keys[(m, "serialization")] for m in ms]
        body: dict[str, Any] = refs[0] if len(refs) == 1 else {"anyOf": refs}
        defs[verb] = {"allOf": [body, {"type": "object", "required": ["schema_version"],
                                       "properties": {"schema_version": version}}]}
    for verb in LOOSE:
        defs[verb] = {"type": "object", "required": ["schema_version"], "properties": {"schema_version": version},
                      "description": "not modelled yet: any object carrying the schema version"}
    # a document model forbids extra keys; schema_version is the one key every document adds
    for ms in models.values():
        for m in ms:
            d = defs[m.__name__]
            d.setdefault("properties", {})["schema_version"] = version
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://github.com/qmodel/qmodel/docs/output-schema.json",
            "title": "qmodel --json output", "schema_version": SCHEMA_VERSION,
            "anyOf": [{"$ref": f"#/$defs/{v}"} for v in (*models, *LOOSE)], "$defs": defs}


if __name__ == "__main__":  # pragma: no cover
    import json
    import sys

    json.dump(json_schema(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
