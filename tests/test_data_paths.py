"""Data folder and file paths: a fresh clone without data runs its examples (or says how to get the
file), QMODEL_DATA_DIR pointing to an empty folder hides the data, ``data:`` paths stay inside the
data folder, errors never echo a file's content, and over-long paths are one-line errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.errors import DataError, InputError

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.*"))


@pytest.fixture
def no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """QMODEL_DATA_DIR set to an empty folder (what .ci/run's second pass does); the trace cache cleared."""
    from qmodel.validation.traces import clear_cache

    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("QMODEL_DATA_DIR", str(empty))
    clear_cache()
    yield empty
    clear_cache()


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_empty_data_dir_means_no_data_and_no_fallback(no_data: Path) -> None:
    # shared/data beside the checkout and the download cache may exist: an explicit (empty) folder wins
    from qmodel.settings import data_dir

    assert data_dir() is None
    (no_data / "x").mkdir()
    assert data_dir() == no_data


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_runs_without_data_or_says_how_to_get_it(no_data, capsys, path: Path) -> None:
    rc = main(["solve", str(path)])
    if "data:" not in path.read_text(encoding="utf-8"):
        out, err = capsys.readouterr()
        assert rc == 0, err
        return
    assert rc == 2
    line = _one_line(capsys)
    assert "qmodel trace fetch " in line and "--dest" in line and "QMODEL_DATA_DIR" in line, line


def test_missing_data_file_names_the_fetch_command(no_data) -> None:
    from qmodel.validation.traces import load_trace

    with pytest.raises(DataError) as e:
        load_trace("data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    assert f"qmodel trace fetch azure-conv-2023 --dest {no_data}" in str(e.value)
    with pytest.raises(DataError) as e:
        load_trace("data:nowhere/a.csv")  # not in the fetch registry: only the folder can help
    assert "set QMODEL_DATA_DIR to a folder holding nowhere/a.csv" in str(e.value)


def test_bundled_tables_are_the_registry_bytes() -> None:
    # catalog/tables/ holds byte-identical copies: same sha256 as `qmodel trace fetch` verifies
    from qmodel.validation.fetch import DATASETS

    by_rel = {ds.rel_path: ds for ds in DATASETS.values()}
    tables = sorted((REPO / "catalog" / "tables").rglob("*.json"))
    assert tables
    for f in tables:
        ds = by_rel[str(f.relative_to(REPO / "catalog" / "tables"))]
        assert hashlib.sha256(f.read_bytes()).hexdigest() == ds.sha256


@pytest.mark.parametrize("ref", ["data:../../../../etc/passwd", "data:/etc/passwd", "data:a/../../b.csv",
                                 "data:..\\..\\x.csv", "data:", "data:C:/x.csv"])
def test_data_paths_stay_in_the_data_folder(tmp_path, monkeypatch, ref: str) -> None:
    from qmodel.settings import resolve_data_path
    from qmodel.validation.traces import load_trace

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("x")
    monkeypatch.setenv("QMODEL_DATA_DIR", str(tmp_path / "d"))
    with pytest.raises(InputError, match="inside the data folder"):
        resolve_data_path(ref)
    with pytest.raises(InputError, match="inside the data folder"):
        load_trace(ref)


def test_scenario_file_data_escape_is_one_line_naming_the_field(tmp_path, capsys) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("model: llama-3.1-8b\n"
                 "workload:\n  arrivals: {kind: poisson, rate_per_s: 1}\n"
                 "  lengths: {kind: empirical, path: 'data:../../../../etc/passwd'}\n"
                 "slo: {ttft_s: 1 s, tpot_s: 60 ms}\n"
                 "deployment: {topology: colocated, pool: {gpu: h100-sxm}}\n", encoding="utf-8")
    assert main(["solve", str(p)]) == 2
    line = _one_line(capsys)
    assert "workload.lengths.path" in line and "root:" not in line


@pytest.mark.parametrize("fmt", ["auto", "azure", "qmodel"])
def test_trace_errors_do_not_echo_the_file(tmp_path, fmt: str) -> None:
    # a file that is not a trace (e.g. /etc/passwd): the error says what is missing, not what is there
    from qmodel.validation.traces import load_trace

    p = tmp_path / "secret.csv"
    p.write_text("daemon:x:1:1:SECRET-first-line\nmore SECRET\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_trace(p, format=fmt)
    assert "SECRET" not in str(e.value) and "daemon" not in str(e.value)


@pytest.mark.parametrize("name", ["x" * 300 + ".csv", "d/" + "y" * 300 + ".csv"])
def test_over_long_path_is_a_one_line_error(tmp_path, capsys, name: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("model: llama-3.1-8b\n"
                 f"workload:\n  arrivals: {{kind: poisson, rate_per_s: 1}}\n  lengths: {{kind: empirical, path: '{name}'}}\n"
                 "slo: {ttft_s: 1 s, tpot_s: 60 ms}\n"
                 "deployment: {topology: colocated, pool: {gpu: h100-sxm}}\n", encoding="utf-8")
    assert main(["solve", str(p)]) == 2
    line = _one_line(capsys)
    assert len(line) < 250 and "..." in line  # the path shortened to <= 80 characters around "..."


def test_over_long_path_to_the_loaders(tmp_path) -> None:
    from qmodel.perf.tables import load_distserve
    from qmodel.validation.traces import load_trace

    long = str(tmp_path / ("z" * 300))
    with pytest.raises(DataError, match="cannot read"):
        load_trace(long)
    with pytest.raises(DataError, match="cannot read"):
        load_distserve(long, "facebook/opt-13b", 1)
