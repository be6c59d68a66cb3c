"""``--rate LO:HI:STEP`` is inclusive of HI and never passes it (5:40:10 gave 5..45 by banker's rounding)."""

from __future__ import annotations

import pytest

from qmodel.cli.common import parse_rate_range
from qmodel.errors import InputError


@pytest.mark.parametrize("text, want", [("5:40:10", [5, 15, 25, 35]), ("5:45:10", [5, 15, 25, 35, 45]),
                                        ("0.2:2.0:0.1", [round(0.2 + 0.1 * i, 10) for i in range(19)]),
                                        ("1:1:1", [1]), ("1,2.5,4", [1, 2.5, 4])])
def test_rate_ranges(text, want):
    assert parse_rate_range(text) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("text", ["5:4:1", "0:1:1", "1:2:0", "a:b:c", "1,-2"])
def test_bad_ranges_are_one_input_error(text):
    with pytest.raises(InputError, match="--rate"):
        parse_rate_range(text)
