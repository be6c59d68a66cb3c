"""The fuzz contract (issue 16): bad input never crashes a scenario verb.

Every case runs in-process through ``qmodel.cli.main.main``; the suite requires 0 tracebacks,
0 exit codes outside {0, 2, 3, 4} or other than the category's, 0 NaN/inf in any output, 0 hangs
(> 30 s), and every error one line naming the field with the value shortened. Counts by category
print with ``-s``. The CI profile (2,000 cases) runs in the normal suite; the long profile
(10,000 cases, another seed) is marked ``slow``. A case may carry ``Case.xfail`` (a known open
issue item): such cases are counted apart by the runner and left out of these contracts; none is
marked today.
"""

from __future__ import annotations

import time

import pytest

from tests.fuzz.cases import generate
from tests.fuzz.runner import report, run_all

CI_CASES, CI_SEED = 2100, 0  # >= 2,000 cases of this branch's categories
LONG_CASES, LONG_SEED = 10500, 1  # >= 10,000


@pytest.fixture(autouse=True)
def _quiet_numpy():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        yield


def _run(n: int, seed: int, tmp_path, own: bool) -> None:
    cases = [c for c in generate(n, seed) if (c.xfail is None) == own]
    t0 = time.perf_counter()
    outcomes, counts = run_all(cases, tmp_path)
    print(f"\nfuzz: {len(cases)} cases (seed {seed}) in {time.perf_counter() - t0:.1f} s\n{report(counts)}")
    bad = [o for o in outcomes if o.failures]
    detail = "\n".join(f"{o.failures} {o.case.describe()} rc={o.rc}: "
                       f"{(o.error.strip().splitlines() or [''])[-1] if o.error else o.stderr.strip()[:200]}"
                       for o in bad[:10])
    assert not bad, f"{len(bad)} of {len(cases)} cases break the contract:\n{detail}"


def test_fuzz_ci_profile(tmp_path):
    _run(CI_CASES, CI_SEED, tmp_path, own=True)



@pytest.mark.slow
def test_fuzz_long_profile(tmp_path):
    _run(LONG_CASES, LONG_SEED, tmp_path, own=True)

