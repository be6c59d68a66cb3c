"""Units: bits vs bytes, decimal vs binary prefixes, durations, tokens. Exact values."""

import pytest

from qmodel.errors import InputError
from qmodel.units import (dtype_bits, format_bandwidth, format_bytes, format_duration, parse_bandwidth, parse_bytes,
                          parse_duration, parse_flops, parse_power, parse_rate, parse_tokens)


@pytest.mark.parametrize("text, expected", [
    ("400 Gbps", 50e9), ("400 Gb/s", 50e9), ("200Gbps", 25e9), ("25 GB/s", 25e9), ("25 GBps", 25e9),
    ("4.8 TB/s", 4.8e12), ("10 Gbps", 1.25e9), ("100 Mbps", 12.5e6), (3.35e12, 3.35e12),
])
def test_bandwidth_bits_vs_bytes(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("141 GiB", 141 * 2**30), ("80 GB", 80e9), ("80GB", 80e9), ("1.125 GiB", 1.125 * 2**30),
    ("512 MiB", 512 * 2**20), ("2 TB", 2e12), ("1024", 1024.0),
])
def test_bytes_decimal_vs_binary(text, expected):
    assert parse_bytes(text) == pytest.approx(expected, rel=1e-12)


def test_gb_and_gib_differ():
    assert parse_bytes("80 GiB") / parse_bytes("80 GB") == pytest.approx(2**30 / 1e9)


@pytest.mark.parametrize("text, expected", [("50 ms", 0.05), ("1.5 s", 1.5), ("200 us", 2e-4), ("2 min", 120.0), (0.3, 0.3)])
def test_durations(text, expected):
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [("2k", 2000), ("128Ki", 131072), ("1.5M", 1.5e6), ("4096", 4096), (512, 512)])
def test_tokens(text, expected):
    assert parse_tokens(text) == expected


def test_flops_power_rate():
    assert parse_flops("989 TFLOPS") == 989e12
    assert parse_power("1.2 kW") == 1200.0
    assert parse_rate("300 req/min") == 5.0
    assert parse_rate("2.5 req/s") == 2.5


@pytest.mark.parametrize("bad, parser", [("400 Gbit", parse_bandwidth), ("80 Gb", parse_bytes), ("fast", parse_duration),
                                         ("5 parsecs", parse_duration), ("nan", parse_bytes), (True, parse_bytes)])
def test_bad_units_name_field_and_allowed(bad, parser):
    with pytest.raises(InputError) as ei:
        parser(bad, "link.bandwidth")
    assert "link.bandwidth" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_dtype_bits_sub_byte():
    assert dtype_bits("bf16") == 16
    assert dtype_bits("fp8") == 8
    assert dtype_bits("3bit") == 3
    assert dtype_bits("int4") == 4
    with pytest.raises(InputError):
        dtype_bits("fp7.5x")


def test_formatting_round_trip():
    assert format_bytes(141 * 2**30) == "141 GiB"
    assert format_bandwidth(50e9, bits=True) == "400 Gbps"
    assert format_bandwidth(25e9) == "25 GB/s"
    assert format_duration(0.05) == "50 ms"
    assert parse_bandwidth(format_bandwidth(12.5e9)) == pytest.approx(12.5e9)
