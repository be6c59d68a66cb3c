"""Scenario files and result exports for the TUI (YAML, TOML, JSON in; YAML, TOML, JSON, CSV out).

Reading goes through the scenario loader's own parser so the TUI accepts exactly what the CLI
accepts; paths stay as written (``data:...`` or relative to the file) and resolve at solve time.
Saving writes the validated scenario (units normalised to SI numbers, defaults filled in), so a
saved file loads back to the same scenario hash.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable

from qmodel.errors import DataError, InputError
from qmodel.toml_out import toml_value

__all__ = ["read_raw", "dump_scenario", "write_scenario", "to_toml", "write_json", "write_csv", "export_results", "SCENARIO_SUFFIXES"]

SCENARIO_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


def read_raw(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The scenario file as a dict (not validated: the form shows field errors inline)."""
    from qmodel.scenario import read_scenario_data, apply_overrides  # the CLI's reader: same formats, same messages

    p = Path(path).expanduser()
    data = read_scenario_data(p)
    if overrides:
        data = apply_overrides(data, overrides)
    data.setdefault("name", p.stem)
    return data


def to_toml(data: dict[str, Any], _prefix: str = "") -> str:
    """Nested dicts of scalars as TOML (tables for sub-dicts; None values are left out)."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for k, v in data.items():
        if v is None:
            continue
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {toml_value(v, _prefix + k)}")
    out = "\n".join(lines)
    for k, v in tables:
        name = f"{_prefix}{k}"
        body = to_toml(v, name + ".")
        scalars = any(not isinstance(x, dict) and x is not None for x in v.values())
        block = (f"[{name}]\n" if scalars else "") + body
        out += ("\n\n" if out else "") + block.strip("\n")
    return out + ("\n" if not _prefix else "")


def dump_scenario(raw: dict[str, Any]) -> dict[str, Any]:
    """Validate the form's raw dict (paths as typed) and return the canonical dict to save."""
    from qmodel.scenario import parse_scenario

    return parse_scenario(raw).model_dump(mode="json", exclude_none=True)


def write_scenario(raw: dict[str, Any], path: str | Path) -> Path:
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if suffix not in SCENARIO_SUFFIXES:
        raise InputError("file name", str(p), "scenario files end in .yaml, .yml, .toml or .json")
    data = dump_scenario(raw)
    if suffix in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    elif suffix == ".toml":
        text = to_toml(data)
    else:
        text = json.dumps(data, indent=2) + "\n"
    _write(p, text)
    return p


def _write(p: Path, text: str) -> None:
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as err:
        raise DataError(str(p), f"cannot write ({err.strerror})") from None


def write_json(payload: Any, path: str | Path) -> Path:
    from qmodel.cli.output import to_plain

    p = Path(path).expanduser()
    _write(p, json.dumps(to_plain(payload), indent=2) + "\n")
    return p


def write_csv(header: list[str], rows: Iterable[list[Any]], path: str | Path) -> Path:
    p = Path(path).expanduser()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else (f"{v:.10g}" if isinstance(v, float) else v) for v in r])
    _write(p, buf.getvalue())
    return p


def export_results(path: str | Path, kind: str, current: Any, pinned: list[tuple[str, Any]], replay_check: Any) -> Path:
    """Write the current analysis, the pinned ones and the replay check: ``kind`` "json" (the whole
    payload, :func:`~qmodel.tui.report.export_payload`) or "csv" (one row per entry and metric)."""
    from .report import export_payload, metric_rows

    if kind == "json":
        return write_json(export_payload(current, pinned, replay_check), path)
    entries = ([("current", current)] if current else []) + pinned
    rows = [[label, a.scenario.name, m, "" if v is None else v, shown]
            for label, a in entries for m, v, shown in metric_rows(a)]
    return write_csv(["entry", "scenario", "metric", "value", "shown"], rows, path)
