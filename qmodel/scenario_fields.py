"""What the scenario schema allows and defaults at a dotted path, read from the pydantic models.

Front ends that offer the scenario's choices (the TUI form's selects and fallbacks) ask here
instead of re-typing the schema's ``Literal``s and defaults, so a value added to the schema shows
up in them and a default changed in the schema changes there too.

A path is the dotted key of a scenario file (``deployment.link_sharing``,
``workload.arrivals.kind``). Where a path crosses a discriminated union (``deployment``,
``workload.arrivals``, ``workload.lengths``, ``perf``) it goes through every member that has the
next field, or only the member whose tag is ``tag`` when one is given. Reading ``model_fields``
does not build the models' pydantic schemas (:class:`~qmodel.scenario_base.Strict` defers them).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from qmodel.scenario import Scenario

__all__ = ["SchemaField", "schema_field"]


@dataclass(frozen=True)
class SchemaField:
    """One scenario path as the schema declares it.

    ``choices``: the allowed values of a ``Literal`` field, in the schema's order (for a union's
    discriminator, each member's tag in the union's member order); empty for free fields.
    ``default``: the schema's default when ``has_default`` (every member reached agrees on one).
    For a discriminator that has none of its own, the default is the tag of the parent field's
    default (``perf`` defaults to a roofline model, so ``perf.kind`` defaults to ``roofline``).
    """

    path: str
    choices: tuple[Any, ...]
    has_default: bool
    default: Any = None


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _alternatives(tp: Any) -> tuple[Any, ...]:
    """The alternatives of a (possibly Annotated, possibly Optional) union; the type itself otherwise."""
    tp = _strip(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return tuple(_strip(a) for a in get_args(tp))
    return (tp,)


def _models(tp: Any) -> list[type[BaseModel]]:
    return [a for a in _alternatives(tp) if isinstance(a, type) and issubclass(a, BaseModel)]


def _tags_of(model: type[BaseModel]) -> set[Any]:
    """The values of a model's single-valued ``Literal`` fields: a union member's discriminator tag."""
    out: set[Any] = set()
    for info in model.model_fields.values():
        alts = _alternatives(info.annotation)
        if len(alts) == 1 and get_origin(alts[0]) is Literal and len(get_args(alts[0])) == 1:
            out.add(get_args(alts[0])[0])
    return out


def _default(info: FieldInfo) -> tuple[bool, Any]:
    if info.default is not PydanticUndefined:
        return True, info.default
    if info.default_factory is not None:
        return True, info.default_factory()  # type: ignore[call-arg]
    return False, None


def _inherited(parent: FieldInfo, name: str) -> Any:
    """Field ``name`` of ``parent``'s default (a model), read off the class when the default is a
    model class's factory, so no model is built; ``PydanticUndefined`` where there is none."""
    factory = parent.default_factory
    if parent.default is PydanticUndefined and isinstance(factory, type) and issubclass(factory, BaseModel):
        info = factory.model_fields.get(name)
        return PydanticUndefined if info is None or info.default_factory is not None else info.default
    has, value = _default(parent)
    return getattr(value, name, PydanticUndefined) if has else PydanticUndefined


def schema_field(path: str, tag: str | None = None) -> SchemaField:
    """The allowed values and default of the scenario field at ``path``.

    ``tag`` picks one member of the unions the path crosses (``schema_field("workload.arrivals.rate_per_s",
    "trace")``); without it every member with the field counts: the choices are the union of theirs
    (in member order) and a default only if they all have the same one. A union with no member
    tagged ``tag`` (the tag belongs to another union on the path) is crossed whole. A path no model
    has is a ``KeyError`` naming it.
    """
    parts = path.split(".")
    models: list[type[BaseModel]] = [Scenario]
    parents: list[FieldInfo] = []
    infos: list[FieldInfo] = []
    for i, part in enumerate(parts):
        if tag is not None and len(models) > 1:
            tagged = [m for m in models if tag in _tags_of(m)]
            models = tagged or models
        infos = [m.model_fields[part] for m in models if part in m.model_fields]
        if not infos:
            raise KeyError(f"{path!r}: the scenario schema has no field {'.'.join(parts[:i + 1])!r}")
        if i < len(parts) - 1:
            parents = infos
            models = [m for info in infos for m in _models(info.annotation)]
    choices: list[Any] = []
    for info in infos:
        for alt in _alternatives(info.annotation):
            for value in get_args(alt) if get_origin(alt) is Literal else ():
                if value not in choices:
                    choices.append(value)
    defaults = [_default(info) for info in infos]
    has = all(h for h, _ in defaults) and all(d == defaults[0][1] for _, d in defaults)
    default = defaults[0][1] if has else None
    if not has and parents:
        inherited = [_inherited(p, parts[-1]) for p in parents]
        if inherited[0] is not PydanticUndefined and all(d == inherited[0] for d in inherited):
            has, default = True, inherited[0]
    return SchemaField(path, tuple(choices), has, default)
