"""Text output fits 100 columns by default (issue: solve printed 233, compare 276, plan 304), ``--wide``
turns wrapping off, and wrapping never changes what a line says: prose re-joins to the same words,
a wrapped shell command parses to the same arguments, numeric table cells stay whole."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.cli.output import DEFAULT_WIDTH, print_table, say, say_command, set_width

EX = str(Path(__file__).resolve().parent.parent / "examples" / "opt13b-disagg-a100.yaml")

VERBS = [["solve", EX], ["solve", EX, "--check", "--requests", "400"], ["goodput", EX, "--sensitivities"],
         ["compare", EX], ["plan", EX, "--top", "3"], ["sweep", EX, "--rate", "1:20:5"],
         ["replay", EX, "--requests", "400"], ["catalog", "list"]]


@pytest.mark.parametrize("argv", VERBS, ids=lambda a: " ".join(a[:1] + a[2:]))
def test_every_verb_fits_100_columns(argv, capsys):
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(x) for x in lines) <= DEFAULT_WIDTH


def test_wide_turns_wrapping_off(capsys):
    assert main(["solve", EX, "--wide"]) == 0
    wide = capsys.readouterr().out
    assert main(["solve", EX]) == 0
    narrow = capsys.readouterr().out
    assert max(len(x) for x in wide.splitlines()) > DEFAULT_WIDTH
    def words(text: str) -> list[str]:  # the table rule's length follows the wrapped column's width
        return [w for w in text.split() if set(w) != {"-"}]

    assert words(wide) == words(narrow)  # the same words, only the line breaks differ


def test_prose_wraps_with_a_hanging_indent_and_keeps_every_word(capsys):
    set_width(40)
    try:
        text = "binding: " + " ".join(f"word{i}" for i in range(30))
        say(text)
        out = capsys.readouterr().out.splitlines()
    finally:
        set_width(DEFAULT_WIDTH)
    assert all(len(x) <= 40 for x in out) and len(out) > 1
    assert all(x.startswith("  ") for x in out[1:])
    assert " ".join(out).split() == text.split()


def test_a_wrapped_command_parses_to_the_same_arguments(capsys):
    cmd = ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --port 8100 "
           "--max-num-batched-tokens 8192 --kv-transfer-config "
           "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_producer\"}'")
    set_width(60)
    try:
        say_command(cmd)
        out = capsys.readouterr().out
    finally:
        set_width(DEFAULT_WIDTH)
    assert len(out.splitlines()) > 1 and all(len(x) <= 60 or "'" in x for x in out.splitlines())
    assert shlex.split(out.replace("\\\n", "")) == shlex.split(cmd)  # the shell drops backslash-newline


def test_a_table_wraps_its_text_column_and_keeps_numbers_whole(capsys):
    set_width(50)
    try:
        print_table(["name", "rate", "method"], [["a", 12345.678, "long words " * 8], ["b", 0.5, "short"]])
        out = capsys.readouterr().out.splitlines()
    finally:
        set_width(DEFAULT_WIDTH)
    assert all(len(x) <= 50 for x in out)
    assert "1.235e+04" in out[2] and out[2].startswith("a")
    assert " ".join(x[x.index("long") if "long" in x else len(x):] for x in out[2:-1]).split() == ("long words " * 8).split()


def test_markdown_tables(capsys):
    assert main(["solve", EX, "--markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines.index("| metric | mean | p50 | p90 | p99 |")
    assert lines[head + 1] == "|---|---|---|---|---|" and lines[head + 2].startswith("| TTFT | ")
    station = next(i for i, x in enumerate(lines) if x.startswith("| station |"))
    assert lines[station + 1].split("|")[2] == "---:"  # utilization is numeric: right-aligned


def test_compare_csv_has_one_row_per_topology(capsys):
    import csv
    import io

    assert main(["compare", EX, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["topology"] for r in rows] == ["colocated", "chunked", "disaggregated"]
    assert all(float(r["goodput_rps"]) >= 0 for r in rows)
