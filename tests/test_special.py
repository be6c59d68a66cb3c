"""qmodel.special: scipy's own special-function ufuncs without running ``scipy/special/__init__.py``
(docs/startup.md, round 8). The functions must be the very objects ``scipy.special`` exports (so
every value is scipy's, bit for bit), the package must stay unrun until something else uses it, and
then be the complete package for that user (scipy.stats, errstate, warnings)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NAMES = ("gammainc", "gammaincinv", "gammaln", "pdtr", "pdtrc", "ndtr")


def _fresh(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_the_ufuncs_are_scipy_specials_own_objects() -> None:
    import scipy.special

    import qmodel.special as qs

    for name in NAMES:
        assert getattr(qs, name) is getattr(scipy.special, name), name


def test_values_equal_scipy_special_bit_for_bit() -> None:
    """The same objects give the same bits; checked on values too, in case a scipy release wraps them."""
    import scipy.special

    import qmodel.special as qs

    a = np.array([0.1, 0.5, 1.0, 3.0, 17.5, 250.0, 4096.0])
    x = np.array([0.05, 0.7, 1.0, 2.5, 20.0, 240.0, 5000.0])
    q = np.array([1e-9, 0.01, 0.3, 0.5, 0.9, 0.999, 1 - 1e-12])
    k = np.array([0.0, 1.0, 3.0, 10.0, 40.0, 300.0, 4000.0])
    for got, want in [(qs.gammainc(a, x), scipy.special.gammainc(a, x)),
                      (qs.gammaincinv(a, q), scipy.special.gammaincinv(a, q)),
                      (qs.gammaln(x), scipy.special.gammaln(x)),
                      (qs.pdtr(k, x), scipy.special.pdtr(k, x)),
                      (qs.pdtrc(k, x), scipy.special.pdtrc(k, x)),
                      (qs.ndtr(np.log(x)), scipy.special.ndtr(np.log(x)))]:
        assert np.array_equal(got, want)


def test_a_fresh_process_does_not_run_the_package_init() -> None:
    out = _fresh("import sys\n"
                 "from qmodel.special import gammainc\n"
                 "print(gammainc(2.0, 1.0), 'scipy.special._support_alternative_backends' in sys.modules)\n")
    value, ran = out.split()
    assert abs(float(value) - (1.0 - 2.0 / math.e)) < 1e-15  # P(2, 1) = 1 - 2/e, to round-off
    assert ran == "False"


def test_the_package_is_complete_for_its_next_user() -> None:
    """After qmodel.special: ``import scipy.special`` finishes the package on first use; errstate,
    SpecialFunctionWarning and scipy.stats work; the ufuncs are the ones qmodel holds."""
    out = _fresh("import sys, warnings\n"
                 "import qmodel.special as qs\n"
                 "import scipy.special as s\n"
                 "assert s.gammaln is qs.gammaln and s._ufuncs.gammainc is qs.gammainc\n"
                 "assert 'scipy.special._support_alternative_backends' in sys.modules\n"
                 "assert '__getattr__' not in vars(s)\n"
                 "with s.errstate(all='warn'), warnings.catch_warnings(record=True) as w:\n"
                 "    warnings.simplefilter('always')\n"
                 "    s.pdtr(-1, 1.0)\n"
                 "assert any(issubclass(x.category, s.SpecialFunctionWarning) for x in w), w\n"
                 "from scipy.stats import kendalltau, norm\n"
                 "assert norm.cdf(1.0) == qs.ndtr(1.0)\n"
                 "print(kendalltau([1, 2, 3], [1, 3, 2]).statistic)\n")
    assert abs(float(out) - 1 / 3) < 1e-12


def test_after_the_package_it_uses_the_package() -> None:
    out = _fresh("import scipy.special as s\n"
                 "import qmodel.special as qs\n"
                 "print(all(getattr(qs, n) is getattr(s, n) for n in %r))\n" % (NAMES,))
    assert out == "True"


def test_a_colocated_solve_leaves_the_package_init_unrun() -> None:
    """The colocated and chunked stations call gammainc/gammaincinv/pdtrc: through qmodel.special, so
    a fresh ``qmodel solve`` of them no longer pays ``import scipy.special`` (~0.17 s of CPU)."""
    out = _fresh("import sys, io, contextlib\n"
                 "from qmodel.cli.main import main\n"
                 "with contextlib.redirect_stdout(io.StringIO()):\n"
                 "    assert main(['solve', 'examples/opt13b-colocated-a100.yaml']) == 0\n"
                 "print('scipy.special._ufuncs' in sys.modules, 'scipy.special._support_alternative_backends' in sys.modules)\n")
    assert out == "True False"
