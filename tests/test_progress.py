"""Progress bars: on stderr only, only when asked (``--progress``) or on a terminal, never changing
what a verb prints on stdout or computes (the replay is byte-identical with its marks)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.progress import Progress

EX = str(Path(__file__).resolve().parent.parent / "examples" / "opt13b-disagg-a100.yaml")


def test_bar_draws_in_place_and_ends_its_line():
    s = io.StringIO()
    with Progress(True, "x", stream=s) as bar:
        bar(1, 4, "steps")
        bar(4, 4, "steps")
    out = s.getvalue()
    assert out.count("\r") == 2 and out.endswith("\n") and "x: steps 4/4 [" + "#" * 24 + "]" in out
    s = io.StringIO()
    with Progress(False, "x", stream=s) as bar:
        bar(1, 4, "steps")
    assert s.getvalue() == ""


@pytest.mark.parametrize("argv", [["sweep", EX, "--rate", "2:20:6"], ["compare", EX],
                                  ["goodput", EX, "--sensitivities"], ["replay", EX, "--requests", "300"],
                                  ["plan", EX, "--top", "1", "--serial", "--no-knee"]], ids=lambda a: a[0])
def test_progress_goes_to_stderr_and_leaves_stdout_alone(argv, capsys):
    assert main([*argv, "--no-progress"]) == 0
    plain = capsys.readouterr()
    assert plain.err == ""
    assert main([*argv, "--progress"]) == 0
    shown = capsys.readouterr()
    assert "\r" in shown.err and "[" in shown.err
    strip = lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("searched "))  # noqa: E731 (wall time)
    assert strip(shown.out) == strip(plain.out)


def test_default_is_off_when_stderr_is_not_a_terminal(capsys):
    assert main(["sweep", EX, "--rate", "2,4"]) == 0
    assert capsys.readouterr().err == ""


def test_replay_is_identical_with_progress_marks():
    from qmodel.scenario import load_scenario
    from qmodel.validation.replay import replay

    sc = load_scenario(EX)
    seen: list[int] = []
    a = replay(sc, n_requests=1500).model_dump_json()
    b = replay(sc, n_requests=1500, progress=lambda d, t, w: seen.append(d)).model_dump_json()
    assert a == b and seen == list(range(1, 101))
