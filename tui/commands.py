"""Command palette entries (Ctrl+P): catalog models, GPUs, links, presets, examples and actions."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider

__all__ = ["QmodelCommands", "palette_entries"]

_GPU_FIELDS = ("deployment.pool.gpu", "deployment.prefill.gpu", "deployment.decode.gpu")


def _examples_dir() -> Path | None:
    # The examples folder beside a source checkout; installed wheels have none, and then none is listed.
    here = Path(__file__).resolve().parent.parent / "examples"
    return here if here.is_dir() else None


def palette_entries(app) -> list[tuple[str, Callable[[], object], str]]:
    """(text, callback, help) for every palette entry; the app's own methods do the work."""
    names = app.names
    out: list[tuple[str, Callable[[], object], str]] = []
    for m in names["models"]:
        out.append((f"Model: {m}", partial(app.set_field, "model", m), "set the model"))
    for g in names["gpus"]:
        out.append((f"GPU: {g}", partial(_set_gpus, app, g), "use this GPU in every pool"))
    for ln in names["links"]:
        out.append((f"Link: {ln}", partial(app.set_field, "deployment.link", ln), "KV-transfer link (disaggregated)"))
    for w in names["workloads"]:
        out.append((f"Workload preset: {w}", partial(_set_preset, app, w), "length mix from the catalog"))
    for topo in ("colocated", "chunked", "disaggregated"):
        out.append((f"Topology: {topo}", partial(app.set_field, "deployment.topology", topo), "switch the deployment"))
    out += [
        ("Export results as JSON", partial(app.action_export, "json"), "current, pinned and replay check (F7)"),
        ("Export results as CSV", partial(app.action_export, "csv"), "one row per metric (F8)"),
        ("Save scenario", app.action_save, "YAML, TOML or JSON (F4)"),
        ("Open scenario", app.action_open, "YAML, TOML or JSON (F3)"),
        ("Pin scenario", app.action_pin, "keep it for side-by-side comparison (F2)"),
        ("Check in replay", app.action_replay, "event-driven replay vs the analytic answer (F6)"),
        ("Run planner", app.action_plan, "search deployments for this workload (F5)"),
        ("Toggle form", app.action_toggle_form, "hide the form to widen the results (F9)"),
    ]
    ex = _examples_dir()
    if ex is not None:
        for f in sorted(ex.glob("*.y*ml")) + sorted(ex.glob("*.toml")) + sorted(ex.glob("*.json")):
            out.append((f"Open example: {f.stem}", partial(_open, app, f), str(f.name)))
    return out


def _set_gpus(app, gpu: str) -> None:
    for key in _GPU_FIELDS:
        app.set_field(key, gpu)


def _set_preset(app, name: str) -> None:
    app.set_field("workload.lengths.kind", "preset")
    app.set_field("workload.lengths.name", name)


def _open(app, path: Path) -> None:
    from qmodel.errors import QmodelError

    from .files import read_raw

    try:
        app.load_raw(read_raw(path), path)
    except QmodelError as err:
        app.notify(str(err), severity="error", timeout=8)


class QmodelCommands(Provider):
    """qmodel's palette provider: fuzzy search over :func:`palette_entries`."""

    async def discover(self) -> Hits:
        for text, cb, help_ in palette_entries(self.app):
            if not text.startswith(("Model:", "GPU:", "Link:", "Open example:")):
                yield DiscoveryHit(text, cb, help=help_)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, cb, help_ in palette_entries(self.app):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), cb, help=help_)
