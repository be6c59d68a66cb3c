"""Packaging: the wheel installs tui/, validation/ and catalog/ inside the qmodel namespace.

Builds a real wheel with pip (build isolation fetches setuptools from the registry, as a fresh
machine would) and imports the three subpackages from it in a clean subprocess, with the source
checkout kept off sys.path so the wheel alone is tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"wheel build failed:\n{proc.stderr[-2000:]}")
    wheels = list(out.glob("qmodel-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_maps_subpackages_into_qmodel(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("qmodel/catalog/") and n.endswith("gpus.toml") for n in names)
    assert any(n.startswith("qmodel/catalog/models/") and n.endswith(".toml") for n in names)
    assert any(n.startswith("qmodel/validation/") for n in names)
    assert any(n.startswith("qmodel/tui/") for n in names)
    top = {n.split("/")[0] for n in names}
    assert not top & {"tui", "validation", "catalog"}, f"stray top-level packages: {top}"


def test_wheel_imports_and_reads_catalog(wheel, tmp_path):
    code = (
        "import sys, qmodel.tui, qmodel.validation, qmodel.catalog\n"
        "assert 'wheel' in qmodel.__file__ or qmodel.__file__.endswith('.whl/qmodel/__init__.py'), qmodel.__file__\n"
        "from qmodel.registry import load_catalog\n"
        "c = load_catalog(); print(len(c.models), len(c.gpus), len(c.links))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["QMODEL_CATALOG_DIR"] = str(tmp_path / "none")
    # -S would drop site-packages (numpy, pydantic); instead put the wheel first and run from tmp_path
    # so the source checkout is not importable.
    env["PYTHONPATH"] = str(wheel)
    proc = subprocess.run([sys.executable, "-c", code.replace("'wheel' in qmodel.__file__ or ", f"{str(wheel)!r} in qmodel.__file__ or ")],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    models, gpus, links = map(int, proc.stdout.split())
    assert models >= 25 and gpus >= 12 and links >= 10


def test_wheel_runs_the_readme_command(wheel, tmp_path):
    """A pip user has no examples/ folder: the README's first command must still run from the wheel
    alone (the examples ship as qmodel.examples), and `qmodel examples copy` gives them the file."""
    import zipfile as zf

    names = zf.ZipFile(wheel).namelist()
    assert "qmodel/examples/llama3-70b-disagg-h100.yaml" in names
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(wheel)
    env["QMODEL_CATALOG_DIR"] = str(tmp_path / "none")
    run = lambda *a: subprocess.run([sys.executable, "-m", "qmodel.cli.main", *a], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=300)
    proc = run("solve", "examples/llama3-70b-disagg-h100.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("llama3-70b-disagg-h100: disaggregated on 16 GPUs")
    proc = run("examples", "copy", "llama3-70b-disagg-h100")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "llama3-70b-disagg-h100.yaml").is_file()


def test_import_qmodel_is_light():
    code = ("import sys, qmodel\n"
            "heavy = [m for m in ('textual', 'sympy', 'scipy.stats', 'scipy') if m in sys.modules]\n"
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"import qmodel pulled in: {proc.stdout.strip()}"


def _pyproject() -> dict:
    import tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_dependency_bounds_do_not_pin_patch_releases():
    """Upper bounds cap a major (``<3``) or a minor (``<4.9``), never a patch release (``<=2.4.6``):
    a patch pin stops a fresh machine from installing the next bug-fix release."""
    import re
    proj = _pyproject()["project"]
    reqs = list(proj["dependencies"]) + [r for extra in proj["optional-dependencies"].values() for r in extra]
    for req in reqs:
        assert "<=" not in req and "==" not in req, f"{req}: pins a release"
        for bound in re.findall(r"<\s*([0-9][0-9.]*)", req):
            assert bound.count(".") <= 1, f"{req}: upper bound {bound} names a patch release"


def test_licence_is_an_spdx_expression():
    """PEP 639: ``license`` is an SPDX string; the table form is deprecated and makes setuptools warn."""
    assert _pyproject()["project"]["license"] == "Apache-2.0"
