"""The CLI imports only the verb it runs (qmodel/cli/main.py): the lazy parser must be the full one
for that verb, ``qmodel --help`` must not change, and ``qmodel solve`` must not load the other
verbs' modules or scipy on a disaggregated example (issue 20: a fresh ``qmodel solve`` <= 0.3 s)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qmodel.cli.main import BLAS_THREAD_VARS, VERB_HELP, VERBS, build_parser

REPO = Path(__file__).resolve().parents[1]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_verb_help_table_is_each_modules_own_help() -> None:
    """VERB_HELP (what ``qmodel --help`` lists without importing the verbs) says what each
    ``cmd_<verb>.register`` passes to ``add_parser``."""
    listed = {a.dest: a.help for a in _subparsers(build_parser())._choices_actions}
    assert listed == VERB_HELP
    assert VERBS == list(VERB_HELP)


@pytest.mark.parametrize("only", ["", "solve", "no-such-verb"])
def test_top_level_help_is_the_same_lazy_or_full(only: str) -> None:
    assert build_parser(only=only).format_help() == build_parser().format_help()


@pytest.mark.parametrize("verb", VERBS)
def test_the_verbs_own_parser_is_the_full_one(verb: str) -> None:
    full = _subparsers(build_parser()).choices[verb]
    lazy = _subparsers(build_parser(only=verb)).choices[verb]
    assert lazy.format_help() == full.format_help()
    assert callable(lazy.get_default("func")) == callable(full.get_default("func"))


def test_solve_imports_neither_other_verbs_nor_scipy() -> None:
    code = ("import sys, io, contextlib\n"
            "from qmodel.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['solve', 'examples/opt13b-disagg-a100.yaml'])\n"
            "assert rc == 0, rc\n"
            "bad = ('qmodel.cli.cmd_', 'qmodel.planner', 'qmodel.perf.importers', 'qmodel.tui', 'qmodel.validation',\n"
            "       'validation', 'textual', 'sympy', 'scipy', 'pandas')\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(bad) and m != 'qmodel.cli.cmd_solve')))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "", f"qmodel solve imported: {proc.stdout.strip()}"


def _fresh(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_import_qmodel_does_not_load_numpy() -> None:
    """The CLI's one-thread BLAS default is set after ``import qmodel`` and must precede numpy."""
    assert _fresh("import sys, qmodel; print('numpy' in sys.modules)", dict(os.environ)) == "False"


@pytest.mark.parametrize("given", [{}, {"OMP_NUM_THREADS": "3"}, {"OPENBLAS_NUM_THREADS": "2"}])
def test_cli_runs_blas_on_one_thread_unless_told(given: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS} | given
    code = "import os; import qmodel.cli.main; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert _fresh(code, env) == (given.get("OPENBLAS_NUM_THREADS", "None") if given else "1")


def test_import_qmodel_does_not_load_pydantic_and_goodput_stays_the_verb() -> None:
    """``qmodel --help`` pays for no models: ``import qmodel`` leaves qmodel.goodput (and pydantic)
    unloaded, yet ``qmodel.goodput`` is the function before and after its submodule loads."""
    code = ("import sys, types, qmodel\n"
            "print('pydantic' in sys.modules, 'qmodel.goodput' in sys.modules)\n"
            "f = qmodel.goodput\n"
            "import qmodel.goodput\n"
            "from qmodel.goodput import goodput_search\n"
            "print(callable(f), f is qmodel.goodput, not isinstance(qmodel.goodput, types.ModuleType))\n")
    assert _fresh(code, dict(os.environ)).split() == ["False", "False", "True", "True", "True"]


def test_solve_resolves_the_scenario_once(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``qmodel solve`` hands the resolution its scenario check made to the Solver (issue 20: no
    rate-independent work repeated in one call; a trace or preset mix resolves in ~10 ms)."""
    import qmodel.build
    import qmodel.solver
    from qmodel.cli.main import main

    calls: list[str] = []
    real = qmodel.build.resolve

    def counted(scenario, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(scenario.name)
        return real(scenario, **kwargs)

    monkeypatch.setattr(qmodel.build, "resolve", counted)
    monkeypatch.setattr(qmodel.solver, "resolve", counted)
    assert main(["solve", str(REPO / "examples" / "opt13b-disagg-a100.yaml"), "--json"]) == 0
    assert '"rate_per_s"' in capsys.readouterr().out
    assert calls == ["opt13b-disagg-a100"]
