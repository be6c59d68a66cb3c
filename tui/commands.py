"""Command palette entries (Ctrl+P): catalog models, GPUs, links, presets, examples and actions."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

from textual.actions import parse
from textual.command import DiscoveryHit, Hit, Hits, Provider

from qmodel.topology import TOPOLOGIES

from .app import TABS

__all__ = ["ACTIONS", "QmodelCommands", "palette_entries"]

_GPU_FIELDS = ("deployment.pool.gpu", "deployment.prefill.gpu", "deployment.decode.gpu")

#: (palette text, app action as in its key bindings, help): every action of the app, each tab included.
ACTIONS: tuple[tuple[str, str, str], ...] = (
    *((f"Tab: {title}", f"show_tab('{tab}')", f"show the {title} tab") for tab, title in TABS),
    ("Tab: next", "next_tab", "the tab to the right (alt+right)"),
    ("Tab: previous", "previous_tab", "the tab to the left (alt+left)"),
    ("Pin scenario to compare", "pin", "keep it for side-by-side comparison on the Compare tab (F2)"),
    ("Clear pinned scenarios", "clear_pins", "empty the Compare tab"),
    ("Load a pinned scenario into the form", "load_pin", "from the Compare tab"),
    ("Run planner", "plan", "search deployments for this workload (F5)"),
    ("Load a plan into the form", "load_plan", "from the Plan tab's results"),
    ("Check in replay", "replay", "event-driven replay vs the analytic answer (F6)"),
    ("Export results as JSON", "export('json')", "current, pinned and replay check (F7)"),
    ("Export results as CSV", "export('csv')", "one row per metric (F8)"),
    ("Save scenario", "save", "YAML, TOML or JSON (F4)"),
    ("Open scenario", "open", "YAML, TOML or JSON (F3)"),
    ("Toggle form", "toggle_form", "hide the form to widen the results (F9)"),
)


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
    for topo in TOPOLOGIES:
        out.append((f"Topology: {topo}", partial(app.set_field, "deployment.topology", topo), "switch the deployment"))
    for text, action, help_ in ACTIONS:
        _, name, args = parse(action)
        out.append((text, partial(getattr(app, f"action_{name}"), *args), help_))
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
