"""Load the catalog: the bundled TOML files in ``qmodel.catalog`` plus the user catalog folder.

File layout (each file may hold several entries):
    models/*.toml   [[model]] tables          -> ModelSpec
    gpus.toml       [[gpu]] tables            -> GPUSpec
    links.toml      [[link]] tables           -> LinkSpec
    workloads.toml  [[workload]] tables       -> WorkloadPreset

Names are case-insensitive. Unknown names raise :class:`CatalogError` with the closest matches.
User entries (``QMODEL_CATALOG_DIR``) override bundled ones of the same name.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable, TypeVar

from pydantic import BaseModel, ValidationError

from qmodel.errors import CatalogError, DataError
from qmodel.settings import user_catalog_dir
from qmodel.specs import GPUSpec, LinkSpec, ModelSpec, WorkloadPreset, anonymous_link, is_bandwidth_text

__all__ = ["Catalog", "load_catalog", "get_model", "get_gpu", "get_link", "get_workload", "clear_cache", "parse_toml_cached"]

T = TypeVar("T", bound=BaseModel)

_TABLES: dict[str, type[BaseModel]] = {"model": ModelSpec, "gpu": GPUSpec, "link": LinkSpec, "workload": WorkloadPreset}


@dataclass
class Catalog:
    models: dict[str, ModelSpec] = field(default_factory=dict)
    gpus: dict[str, GPUSpec] = field(default_factory=dict)
    links: dict[str, LinkSpec] = field(default_factory=dict)
    workloads: dict[str, WorkloadPreset] = field(default_factory=dict)

    def entries(self, kind: str) -> dict:
        """The entries of one kind ('model', 'gpu', 'link' or 'workload'), by lower-case name."""
        return {"model": self.models, "gpu": self.gpus, "link": self.links, "workload": self.workloads}[kind]

    def _get(self, kind: str, name: str, field: str | None = None):
        bucket = self.entries(kind)
        key = name.strip().lower() if isinstance(name, str) else None
        if key in bucket:
            return bucket[key]
        raise CatalogError(kind, name, [v.name for v in bucket.values()], field)

    def model(self, name: str, field: str | None = None) -> ModelSpec:
        """The model called ``name``; an unknown name raises a CatalogError naming ``field`` (default 'model')."""
        return self._get("model", name, field)

    def gpu(self, name: str, field: str | None = None) -> GPUSpec:
        return self._get("gpu", name, field)

    def link(self, name: str, field: str | None = None) -> LinkSpec:
        """The catalog link called ``name``, or for a bandwidth string (``"400 Gbps"``) the anonymous
        link :func:`qmodel.specs.anonymous_link` builds from it."""
        if is_bandwidth_text(name):
            return anonymous_link(name, field or "link")
        return self._get("link", name, field)

    def workload(self, name: str, field: str | None = None) -> WorkloadPreset:
        return self._get("workload", name, field)

    def names(self) -> dict[str, list[str]]:
        return {
            "models": sorted(v.name for v in self.models.values()),
            "gpus": sorted(v.name for v in self.gpus.values()),
            "links": sorted(v.name for v in self.links.values()),
            "workloads": sorted(v.name for v in self.workloads.values()),
        }


def _load_text(cat: Catalog, text: str, origin: str, seen: dict[tuple[str, str], str] | None = None) -> None:
    """Add one file's entries. ``seen`` (kind, name) -> origin catches a name defined twice in one layer
    (bundled or user): a silent last-one-wins there would hide a copy-paste mistake."""
    data = parse_toml_cached(text, origin)
    for kind, cls in _TABLES.items():
        for i, entry in enumerate(data.get(kind, [])):
            try:
                spec = cls.model_validate(entry)
            except ValidationError as err:
                e = err.errors()[0]
                loc = ".".join(str(p) for p in e["loc"])
                label = entry.get("name", f"#{i}") if isinstance(entry, dict) else f"#{i}"
                raise DataError(origin, f"{kind} {label!r}: {loc}: {e['msg']}") from None
            key = spec.name.lower()
            if seen is not None:
                if (kind, key) in seen:
                    raise DataError(origin, f"{kind} {spec.name!r} is already defined in {seen[(kind, key)]}")
                seen[(kind, key)] = origin
            cat.entries(kind)[key] = spec
    unknown = set(data) - set(_TABLES)
    if unknown:
        raise DataError(origin, f"unknown top-level tables {sorted(unknown)}; allowed: {sorted(_TABLES)}")


def parse_toml_cached(text: str, origin: str) -> dict:
    """``tomllib.loads(text)``, compiled once: the parsed table is kept as JSON in the cache folder
    under the SHA-256 of the text (a changed file has a new key; JSON reads ~30x faster than TOML
    parses, which was most of a cold catalog load). A cache that cannot be read or written is
    skipped, never an error."""
    import hashlib
    import json

    from qmodel.settings import cache_dir

    path = cache_dir() / "catalog" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DataError(origin, f"not valid TOML: {err}") from None
    try:
        blob = json.dumps(data)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(blob, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except (OSError, TypeError, ValueError):  # read-only home, or a TOML date JSON cannot hold
        pass
    return data


#: bundled TOML files that hold no catalog entries: the roofline curves (qmodel.perf.efficiency) and
#: the validity bands (qmodel.validity)
_NOT_ENTRIES = ("efficiency.toml", "validity_bands.toml")


def _bundled_files() -> Iterable[tuple[str, str]]:
    root = resources.files("qmodel.catalog")
    stack = [(root, "qmodel.catalog")]
    while stack:
        node, label = stack.pop()
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                stack.append((child, f"{label}/{child.name}"))
            elif child.name.endswith(".toml") and child.name not in _NOT_ENTRIES:
                yield f"{label}/{child.name}", child.read_text(encoding="utf-8")


@lru_cache(maxsize=4)
def _load(user_dir: str) -> Catalog:
    cat = Catalog()
    bundled: dict[tuple[str, str], str] = {}
    for origin, text in _bundled_files():
        _load_text(cat, text, origin, bundled)
    udir = Path(user_dir)
    if udir.is_dir():
        user: dict[tuple[str, str], str] = {}  # user entries may override bundled ones, not each other
        for f in sorted(udir.rglob("*.toml")):
            _load_text(cat, f.read_text(encoding="utf-8"), str(f), user)
    return cat


def load_catalog() -> Catalog:
    """The merged catalog (cached per user-catalog folder)."""
    return _load(str(user_catalog_dir()))


def clear_cache() -> None:
    _load.cache_clear()


def get_model(name: str) -> ModelSpec:
    return load_catalog().model(name)


def get_gpu(name: str) -> GPUSpec:
    return load_catalog().gpu(name)


def get_link(name: str) -> LinkSpec:
    return load_catalog().link(name)


def get_workload(name: str, field: str | None = None) -> WorkloadPreset:
    return load_catalog().workload(name, field)
