"""Rich renderables and flat rows for an :class:`~qmodel.tui.compute.Analysis` (no Textual).

The results panel, the side-by-side comparison and the CSV/JSON exports all read the same
numbers through :func:`metric_rows`, so what is exported is what is shown.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qmodel.units import format_bandwidth, format_duration

from .analysis import Analysis, ReplayCheck
from .layout import keep_whole

__all__ = ["REPLAY_KEY", "in_app_terms", "render_results", "render_compare", "metric_rows", "export_payload",
           "render_replay", "replay_label", "STATION_LABELS", "pct",
           "short_binding"]


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g} req/s"


def _usd(x: float | None) -> str:
    return "—" if x is None else (f"${x:.3f}" if x < 10 else f"${x:.1f}")


#: The app's replay key (tui/app.py binds F6 to the replay); the results say it instead of a CLI flag.
REPLAY_KEY = "F6"

_CLI_CHECK = re.compile(r"check (this scenario )?with --check\b")


def in_app_terms(text: str) -> str:
    """A library sentence as the TUI says it: the CLI's ``--check`` (replay this scenario) becomes
    the replay key, which runs the same replay in the Replay tab."""
    return _CLI_CHECK.sub(f"check this scenario in the replay ({REPLAY_KEY})", text)


def short_binding(text: str) -> str:
    """The first clause of the binding sentence ('TTFT binds: p90 1.2 s vs target 1 s')."""
    return text.split(" (", 1)[0].split(";", 1)[0]


def _layout(a: Analysis) -> str:
    from qmodel.topology import topology_named

    dep = a.scenario.deployment
    return topology_named(dep.topology).layout(dep)


#: How each exported metric is labelled on screen.
LABELS = {
    "topology": "topology", "layout": "layout", "gpus": "GPUs", "rate_per_s": "rate",
    "ttft_p50_s": "TTFT p50", "ttft_p90_s": "TTFT p90", "ttft_p99_s": "TTFT p99",
    "tpot_p50_s": "TPOT p50", "tpot_p90_s": "TPOT p90", "tpot_p99_s": "TPOT p99",
    "attainment": "attainment", "goodput_rps": "goodput", "goodput_per_gpu": "goodput/GPU",
    "usd_per_million_output_tokens": "$/M out tok", "cost_per_hour_usd": "$/hour",
    "max_stable_rate_per_s": "max stable", "binding": "binding",
}


def metric_rows(a: Analysis) -> list[tuple[str, Any, str]]:
    """(metric, raw value in SI units or None, shown text) for the comparison and the exports."""
    r, g = a.result, a.goodput
    rows: list[tuple[str, Any, str]] = [
        ("topology", a.scenario.deployment.topology, a.scenario.deployment.topology),
        ("layout", _layout(a), _layout(a)),
        ("gpus", a.scenario.deployment.gpus, str(a.scenario.deployment.gpus)),
        ("rate_per_s", a.scenario.rate_per_s, _rate(r.rate_per_s if r else a.scenario.rate_per_s)),
    ]
    for dist in ("ttft", "tpot"):
        for q in ("p50", "p90", "p99"):
            v = getattr(getattr(r, dist), q) if r else None
            rows.append((f"{dist}_{q}_s", v, "—" if v is None else format_duration(v)))
    rows += [
        ("attainment", r.attainment if r else None, pct(r.attainment) if r else "—"),
        ("goodput_rps", g.goodput_rps if g else None, _rate(g.goodput_rps) if g else "…"),
        ("goodput_per_gpu", g.goodput_per_gpu if g else None, _rate(g.goodput_per_gpu) if g else "…"),
        ("usd_per_million_output_tokens", a.usd_per_mtok, _usd(a.usd_per_mtok) if g else "…"),
        ("cost_per_hour_usd", g.cost_per_hour_usd if g else None, _usd(g.cost_per_hour_usd) if g else "…"),
        ("max_stable_rate_per_s", a.max_stable[0] if a.max_stable else None,
         _rate(a.max_stable[0]) if a.max_stable else "—"),
        ("binding", r.binding if r else (a.unstable.message if a.unstable else a.error),
         short_binding(r.binding) if r else ("unstable" if a.unstable else "error")),
    ]
    return rows


def _kv(table: Table, key: str, value: RenderableType, style: str = "") -> None:
    table.add_row(Text(key, style="bold"), value if not isinstance(value, str) else Text(value, style=style))


def render_results(a: Analysis | None, stage: str = "") -> RenderableType:
    """The results panel: latencies, attainment, goodput, cost, stations, binding, link, validity."""
    if a is None:
        return Text("Solving…", style="dim")
    if a.error:
        return Group(Text("Cannot solve this scenario", style="bold red"), Text(a.error, style="red"))
    parts: list[RenderableType] = []
    sc = a.scenario
    parts.append(Text.assemble((sc.name, "bold"), f"  {sc.deployment.topology}, {sc.deployment.gpus} GPUs, ",
                               _rate(sc.rate_per_s)))
    if a.unstable:
        u = a.unstable
        parts.append(Text.assemble(("UNSTABLE ", "bold white on red"),
                                   (f"{u.station} saturates at {u.rate_per_s:.4g} req/s; ", "red"),
                                   (f"largest stable rate {u.max_stable_rate_per_s:.4g} req/s", "bold red")))
    r = a.result
    if r is not None:
        lat = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
        lat.add_column("", style="bold")
        for c in ("mean", "p50", "p90", "p99"):
            lat.add_column(c, justify="right", no_wrap=True)
        key = f"p{sc.slo.percentile:g}"
        per_token = sc.slo.tpot_definition == "per_token"  # tpot_s then bounds TBT, not TPOT
        rows = [("TTFT", r.ttft, sc.slo.ttft_s), ("TPOT", r.tpot, None if per_token else sc.slo.tpot_s)]
        if r.tbt is not None:  # TBT = (e2e - TTFT)/L, when the scenario names a TPOT definition
            rows.append(("TBT", r.tbt, sc.slo.tpot_s if per_token else None))
        for name, d, target in rows:
            cells = []
            for k in ("mean", "p50", "p90", "p99"):
                v = getattr(d, k)
                # The percentile the SLO is judged at is coloured by whether it meets the target.
                style = ("green" if v <= target else "bold red") if k == key and target is not None else ""
                cells.append(Text(format_duration(v), style=style))
            lat.add_row(name, *cells)
        parts.append(keep_whole(lat))
        goal = sc.slo.attainment_goal
        ok = r.attainment >= goal
        lo, hi = r.attainment_bounds
        parts.append(Text.assemble(("Attainment ", "bold"), (pct(r.attainment), "bold green" if ok else "bold red"),
                                   f" [{pct(lo)}–{pct(hi)}] goal {pct(goal)}",
                                   f"\n  TTFT≤{format_duration(sc.slo.ttft_s)} {pct(r.ttft_attainment)}",
                                   f"  {'TBT' if per_token else 'TPOT'}≤{format_duration(sc.slo.tpot_s)} "
                                   f"{pct(r.tpot_attainment)}"))
        if r.rejected_fraction:
            parts.append(Text(f"Rejected {pct(r.rejected_fraction)} of requests (beyond the context window; "
                              "counted as SLO misses)", style="yellow"))
    kv = Table.grid(padding=(0, 1))
    kv.add_column(no_wrap=True)
    kv.add_column()
    g = a.goodput
    if g is not None:
        _kv(kv, "Goodput", f"{_rate(g.goodput_rps)}  ({g.goodput_per_gpu:.3g}/GPU)", "bold")
        _kv(kv, "Cost", f"{_usd(a.usd_per_mtok)}/M out tok  {_usd(g.cost_per_hour_usd)}/h")
    else:
        _kv(kv, "Goodput", "computing…" if "goodput" not in a.stage_errors else a.stage_errors["goodput"], "dim")
    if a.max_stable:
        _kv(kv, "Max stable", f"{_rate(a.max_stable[0])} ({a.max_stable[1]})")
    if r is not None:
        _kv(kv, "Binding", r.binding)
        if g is not None and g.goodput_rps > 0:
            _kv(kv, "At goodput", g.binding)
        if r.link is not None:
            lk = r.link
            _kv(kv, "KV link", Text.assemble(
                f"needs {format_bandwidth(lk.bandwidth_needed_bytes_per_s, bits=True)} of "
                + ("" if lk.paths is None or lk.bandwidth_per_path_bytes_per_s is None else
                   f"{lk.paths} paths x {format_bandwidth(lk.bandwidth_per_path_bytes_per_s, bits=True)} = ")
                + f"{format_bandwidth(lk.bandwidth_available_bytes_per_s, bits=True)} ",
                ("ok" if lk.sufficient else "INSUFFICIENT", "green" if lk.sufficient else "bold red"),
                f"; exposed {format_duration(lk.mean_exposed_s)}"))
        if r.validity is not None:
            v = r.validity
            tight = v.inside_envelope and bool(v.bands) and all(max(-b.low, b.high) <= 0.15 for b in v.bands)
            _kv(kv, "Validity", in_app_terms(v.text), "green" if tight else "yellow")
    parts.append(kv)
    if r is not None:
        st = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, title_justify="left")
        st.add_column("station", style="bold", no_wrap=True)
        st.add_column("util", justify="right", no_wrap=True)
        st.add_column("max req/s", justify="right", no_wrap=True)
        st.add_column("p99 wait", justify="right", no_wrap=True)
        for s in r.stations:
            u = s.utilization
            util = Text(f"{u:.2f}", style="red" if u >= 0.9 else "yellow" if u >= 0.8 else "green")
            st.add_row(STATION_LABELS.get(s.name, s.name), util,
                       f"{s.max_stable_rate_per_s:.3g}", format_duration(s.p99_wait_s))
        parts.append(keep_whole(st))
        for w in r.warnings:
            parts.append(Text(in_app_terms(w), style="yellow"))
    if a.sensitivities is not None:
        se = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
        se.add_column("sensitivity", style="bold", no_wrap=True)
        se.add_column("d ln goodput / d ln x", justify="right", no_wrap=True)
        for s in a.sensitivities:
            se.add_row(s.input, f"{s.elasticity:+.2f}" if s.elasticity is not None and not s.note.startswith("not evaluated") else "n/a")
        parts.append(keep_whole(se))
    for name, msg in a.stage_errors.items():
        parts.append(Text(f"{name}: {msg}", style="yellow"))
    if stage:
        parts.append(Text(stage, style="dim italic"))
    return Group(*parts)


def render_compare(entries: Sequence[tuple[str, Analysis]]) -> RenderableType:
    """Pinned scenarios side by side; the best goodput, per-GPU goodput and cost are highlighted.

    Each entry's name and layout head the table, one line each, so the columns hold only short
    values and two pins fit beside the form at 80 columns; more pins scroll sideways."""
    if not entries:
        return Text("Nothing pinned yet: press F2 to pin the current scenario.", style="dim")
    names = Text()
    for label, a in entries:
        names.append(f"{label.split(' ', 1)[0]} ", style="bold")
        names.append(f"{a.scenario.name}", style="italic")
        names.append(f"  {a.scenario.deployment.topology} {_layout(a)}", style="dim")
        names.append(f"; {short_binding(a.result.binding)}\n" if a.result else "\n", style="dim")
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    t.add_column("", style="bold", no_wrap=True)
    for label, _ in entries:
        t.add_column(label.split(" ", 1)[0], justify="right", no_wrap=True)
    rows = [metric_rows(a) for _, a in entries]
    best_of = {"goodput_rps": max, "goodput_per_gpu": max, "usd_per_million_output_tokens": min, "attainment": max}
    for i, (metric, _, _) in enumerate(rows[0]):
        if metric in ("topology", "layout", "binding"):
            continue  # long words and sentences: they head the table, one line per entry
        vals = [rw[i][1] for rw in rows]
        pick = best_of.get(metric)
        finite = [v for v in vals if isinstance(v, (int, float))]
        best = pick(finite) if pick and len(finite) > 1 else None
        cells = [Text(rw[i][2], style="bold green" if best is not None and rw[i][1] == best else "") for rw in rows]
        t.add_row(LABELS.get(metric, metric), *cells)
    return Group(names, keep_whole(t))


#: Station names as the tables show them (the rest as they are).
STATION_LABELS = {"kv_transfer": "KV link"}


def replay_label(metric: str) -> str:
    """A replay metric as shown: ``ttft_p90`` -> ``TTFT p90``, ``tpot_attainment`` -> ``TPOT attain.``,
    ``kv_transfer.utilization`` -> ``KV link`` (listed under a 'utilization' heading)."""
    if metric.endswith(".utilization"):
        name = metric[:-len(".utilization")]
        return STATION_LABELS.get(name, name)
    if metric == "attainment":
        return "attainment"
    kind, _, stat = metric.partition("_")
    return f"{kind.upper()} {'attain.' if stat == 'attainment' else stat}"


def render_replay(check: ReplayCheck) -> RenderableType:
    """Analytic vs replay table; positive differences mean the analytic answer is conservative.

    Latencies, then attainment, then each station's utilization under one heading, so the metric
    column stays as narrow as 'TTFT attain.' and the table fits beside the form at 80 columns."""
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    t.add_column("metric", style="bold", no_wrap=True)
    t.add_column("analytic", justify="right", no_wrap=True)
    t.add_column("replay", justify="right", no_wrap=True)
    t.add_column("diff", justify="right", no_wrap=True)

    def row(metric: str, a: float, r: float, d: float, indent: str = "") -> None:
        if "attainment" in metric:
            av, rv, dv = pct(a), pct(r), f"{d * 100:+.1f} pt"
        elif metric.endswith("utilization"):
            av, rv, dv = f"{a:.3f}", f"{r:.3f}", f"{d * 100:+.1f}%"
        else:
            av, rv, dv = format_duration(a), format_duration(r), f"{d * 100:+.1f}%"
        style = "green" if abs(d) <= 0.1 else "yellow" if abs(d) <= 0.3 else "red"
        t.add_row(indent + replay_label(metric), av, rv, Text(dv, style=style))

    for m in check.rows:
        row(*m)
    if check.stations:
        t.add_row(Text("utilization", style="bold dim"), "", "", "")
        for m in check.stations:
            row(*m, indent="  ")
    head = Text(f"{check.requests} requests at {check.rate_per_s:.4g} req/s, seed {check.seed}: "
                "diff = (analytic - replay) / replay; attainment in points", style="dim")
    return Group(head, keep_whole(t))


def export_payload(current: Analysis | None, pinned: Sequence[tuple[str, Analysis]],
                   replay: ReplayCheck | None = None) -> dict[str, Any]:
    """JSON export: the scenario, the full Result and Goodput, curves, heatmap, pinned summaries."""

    def one(a: Analysis) -> dict[str, Any]:
        d: dict[str, Any] = {
            "scenario": a.scenario.model_dump(mode="json", exclude_none=True),
            "inputs_sha256": a.sha256,
            "result": a.result.model_dump(mode="json") if a.result else None,
            "error": a.error,
            "unstable": None if a.unstable is None else {
                "station": a.unstable.station, "rate_per_s": a.unstable.rate_per_s,
                "max_stable_rate_per_s": a.unstable.max_stable_rate_per_s},
            "goodput": a.goodput.model_dump(mode="json") if a.goodput else None,
            "usd_per_million_output_tokens": a.usd_per_mtok,
            "sensitivities": [s.model_dump(mode="json") for s in a.sensitivities] if a.sensitivities else None,
        }
        if a.curves:
            d["attainment_curves"] = [{"topology": c.topology, "layout": c.layout, "goodput_rps": c.goodput_rps,
                                       "knee_rps": c.knee_rps, "max_stable_rate_per_s": c.max_stable_rate_per_s,
                                       "rates_per_s": list(c.rates), "attainment": list(c.attainment),
                                       "note": c.note} for c in a.curves]
        if a.heatmap:
            h = a.heatmap
            d["pd_heatmap"] = {"gpu": h.gpu, "tp": h.tp, "prefill_instances": list(h.prefill),
                               "decode_instances": list(h.decode),
                               "goodput_rps": [list(row) for row in h.goodput]}
        return d

    out: dict[str, Any] = {"current": one(current) if current else None,
                           "pinned": [{"label": k, **one(a)} for k, a in pinned]}
    if replay is not None:
        out["replay_check"] = {"rate_per_s": replay.rate_per_s, "requests": replay.requests, "seed": replay.seed,
                               "metrics": [{"metric": m, "analytic": a, "replay": r, "difference": d}
                                           for m, a, r, d in replay.rows + replay.stations]}
    return out
