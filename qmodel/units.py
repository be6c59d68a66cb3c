"""Units at the edges, SI inside.

Humans write "400 Gbps", "25 GB/s", "141 GiB", "50 ms" and "2k"; qmodel stores bytes, bytes per
second, seconds, FLOP/s, watts and token counts as plain floats, with the unit in the field name
(``memory_bytes``, ``bandwidth_bytes_per_s``, ``ttft_s``).

Rules that are easy to get wrong and are tested:
  * ``b`` is a bit, ``B`` a byte: "400 Gbps" = "400 Gb/s" = 50e9 B/s; "25 GB/s" = 25e9 B/s.
  * decimal prefixes (k, M, G, T, P) are powers of 1000; binary ones (Ki, Mi, Gi, Ti) powers of 1024.
    "80 GB" = 80e9 bytes; "141 GiB" = 141 * 2**30 bytes.
  * token counts take k/M as 1000-multipliers ("2k" = 2000) and Ki as 1024 ("128Ki" = 131072).

The pydantic ``Annotated`` aliases (:data:`Bytes`, :data:`BytesPerSecond`, :data:`Seconds`, ...)
accept either a number already in SI or a human string, so scenario and catalog files can use either.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Callable

from pydantic import AllowInfNan, BeforeValidator

from qmodel.errors import InputError

__all__ = [
    "parse_bytes",
    "parse_bandwidth",
    "parse_duration",
    "parse_tokens",
    "parse_flops",
    "parse_power",
    "parse_rate",
    "dtype_bits",
    "DTYPE_BITS",
    "format_bytes",
    "format_bandwidth",
    "format_duration",
    "format_flops",
    "Bytes",
    "BytesPerSecond",
    "Seconds",
    "Tokens",
    "FlopsPerSecond",
    "Watts",
    "RatePerSecond",
    "Real",
    "Count",
]

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_NUM = r"(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_QTY = re.compile(_NUM + r"\s*(?P<prefix>Ki|Mi|Gi|Ti|Pi|[kKMGTP]?)(?P<unit>[A-Za-z/$%]*)\s*$")


def _split(text: str, field: str, kind: str) -> tuple[float, str, str]:
    m = _QTY.match(text.strip())
    if not m:
        raise InputError(field, text, f"expected a {kind} such as {_EXAMPLES[kind]}")
    num = float(m.group("num"))
    if not math.isfinite(num):
        raise InputError(field, text, f"expected a finite {kind}")
    return num, m.group("prefix"), m.group("unit")


_EXAMPLES = {
    "size": "'141 GiB' or '80 GB'",
    "bandwidth": "'400 Gbps', '200 Gb/s' or '25 GB/s'",
    "duration": "'50 ms', '1.5 s' or '200 us'",
    "token count": "'2048', '2k' or '128Ki'",
    "compute rate": "'989 TFLOPS'",
    "power": "'700 W' or '1.2 kW'",
    "rate": "'5 req/s' or '300 req/min'",
}


def _finite(x: float, value: object, field: str, kind: str) -> float:
    """``x`` if it is a finite float; a number whose unit multiplier overflows (``'1e308 PB'``) is refused."""
    if not math.isfinite(x):
        raise InputError(field, value, f"expected a finite {kind}")
    return x


def _prefix_mult(prefix: str) -> float:
    return _BIN[prefix] if prefix in _BIN else _DEC[prefix]


def _coerce(value: object, field: str, kind: str) -> str | float:
    if isinstance(value, bool):
        raise InputError(field, value, f"expected a {kind} such as {_EXAMPLES[kind]}")
    if isinstance(value, (int, float)):
        try:
            x = float(value)
        except OverflowError:  # an int beyond float range
            x = math.inf
        return _finite(x, value, field, kind)
    if isinstance(value, str):
        return value
    raise InputError(field, value, f"expected a {kind} such as {_EXAMPLES[kind]}")


def parse_bytes(value: object, field: str = "size") -> float:
    """'141 GiB' -> 151397597184.0; '80 GB' -> 8e10; a bare number is bytes."""
    v = _coerce(value, field, "size")
    if isinstance(v, float):
        return v
    num, prefix, unit = _split(v, field, "size")
    if unit not in ("B", "byte", "bytes", ""):
        raise InputError(field, value, "size units are B with k/M/G/T or Ki/Mi/Gi/Ti prefixes (bits are not a size)")
    if unit == "" and prefix:
        raise InputError(field, value, "write the unit: e.g. '80 GB' or '141 GiB'")
    return _finite(num * _prefix_mult(prefix), value, field, "size")


def parse_bandwidth(value: object, field: str = "bandwidth") -> float:
    """Bandwidth in bytes per second. 'Gbps'/'Gb/s' are bits, 'GB/s'/'GBps' are bytes."""
    v = _coerce(value, field, "bandwidth")
    if isinstance(v, float):
        return v
    num, prefix, unit = _split(v, field, "bandwidth")
    mult = _prefix_mult(prefix)
    if unit in ("bps", "b/s", "bit/s", "bits/s"):
        return _finite(num * mult / 8.0, value, field, "bandwidth")
    if unit in ("Bps", "B/s", "byte/s", "bytes/s"):
        return _finite(num * mult, value, field, "bandwidth")
    raise InputError(field, value, "bandwidth units are bps or b/s (bits) and B/s or Bps (bytes), e.g. '400 Gbps', '25 GB/s'")


_TIME = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6,
         "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0}


def parse_duration(value: object, field: str = "duration") -> float:
    """Seconds. '50 ms' -> 0.05; a bare number is seconds."""
    v = _coerce(value, field, "duration")
    if isinstance(v, float):
        return v
    m = re.match(_NUM + r"\s*(?P<unit>[a-zµ]*)\s*$", v.strip())
    if not m or m.group("unit") not in _TIME and m.group("unit") != "":
        raise InputError(field, value, f"expected a duration such as {_EXAMPLES['duration']}")
    return _finite(float(m.group("num")) * _TIME.get(m.group("unit"), 1.0), value, field, "duration")


def parse_tokens(value: object, field: str = "tokens") -> float:
    """Token counts: '2k' -> 2000, '128Ki' -> 131072, '1.5M' -> 1.5e6."""
    v = _coerce(value, field, "token count")
    if isinstance(v, float):
        return v
    num, prefix, unit = _split(v, field, "token count")
    if unit not in ("", "tok", "tokens", "token"):
        raise InputError(field, value, f"expected a token count such as {_EXAMPLES['token count']}")
    return _finite(num * _prefix_mult(prefix), value, field, "token count")


def parse_flops(value: object, field: str = "flops") -> float:
    """FLOP/s: '989 TFLOPS' -> 9.89e14."""
    v = _coerce(value, field, "compute rate")
    if isinstance(v, float):
        return v
    num, prefix, unit = _split(v, field, "compute rate")
    if unit.upper() not in ("FLOPS", "FLOP/S", "OPS", "TOPS", ""):
        raise InputError(field, value, f"expected a compute rate such as {_EXAMPLES['compute rate']}")
    return _finite(num * _prefix_mult(prefix), value, field, "compute rate")


def parse_power(value: object, field: str = "power") -> float:
    """Watts: '700 W' -> 700.0, '1.2 kW' -> 1200.0."""
    v = _coerce(value, field, "power")
    if isinstance(v, float):
        return v
    num, prefix, unit = _split(v, field, "power")
    if unit not in ("W", ""):
        raise InputError(field, value, f"expected a power such as {_EXAMPLES['power']}")
    return _finite(num * _prefix_mult(prefix), value, field, "power")


def parse_rate(value: object, field: str = "rate") -> float:
    """Requests per second: '5 req/s' -> 5.0, '300 req/min' -> 5.0; a bare number is per second."""
    v = _coerce(value, field, "rate")
    if isinstance(v, float):
        return v
    m = re.match(_NUM + r"\s*(?:req|requests|rps)?\s*(?:/\s*(?P<per>s|sec|min|h|hour))?\s*$", v.strip())
    if not m:
        raise InputError(field, value, f"expected a rate such as {_EXAMPLES['rate']}")
    per = {"s": 1.0, "sec": 1.0, None: 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}[m.group("per")]
    return _finite(float(m.group("num")) / per, value, field, "rate")


#: Storage bits per element for weight and KV dtypes. Sub-byte KV (e.g. 3-bit) is first-class.
DTYPE_BITS: dict[str, float] = {
    "fp32": 32, "float32": 32, "tf32": 32,
    "bf16": 16, "fp16": 16, "float16": 16, "bfloat16": 16,
    "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8,
    "fp6": 6, "int6": 6,
    "int4": 4, "fp4": 4, "nvfp4": 4.5,  # NVFP4: 4-bit values + one FP8 scale per 16 elements
    "mxfp4": 4.25,  # 4-bit values + one 8-bit scale per 32 elements
    "int3": 3, "int2": 2,
}


def dtype_bits(name: str, field: str = "dtype") -> float:
    """Bits per element for a dtype name; also accepts 'Nbit' (e.g. '3bit')."""
    key = str(name).strip().lower()
    if key in DTYPE_BITS:
        return float(DTYPE_BITS[key])
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*-?bits?", key)
    if m and 0 < float(m.group(1)) <= 64:
        return float(m.group(1))
    raise InputError(field, name, f"known dtypes are {', '.join(sorted(DTYPE_BITS))}, or 'Nbit'")


def _fmt(x: float, units: list[tuple[float, str]], digits: int = 3) -> str:
    for scale, name in units:
        if abs(x) >= scale:
            return f"{x / scale:.{digits}g} {name}"
    scale, name = units[-1]
    return f"{x / scale:.{digits}g} {name}"


def format_bytes(n: float, binary: bool = True) -> str:
    """141*2**30 -> '141 GiB' (binary=True) or '151 GB'."""
    if binary:
        return _fmt(n, [(2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")])
    return _fmt(n, [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")])


def format_bandwidth(bytes_per_s: float, bits: bool = False) -> str:
    """50e9 -> '50 GB/s', or with bits=True '400 Gbps'."""
    if bits:
        return _fmt(bytes_per_s * 8, [(1e12, "Tbps"), (1e9, "Gbps"), (1e6, "Mbps"), (1e3, "kbps"), (1.0, "bps")])
    return _fmt(bytes_per_s, [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")])


def format_duration(seconds: float) -> str:
    """0.05 -> '50 ms'."""
    return _fmt(seconds, [(3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")])


def format_flops(flops: float) -> str:
    return _fmt(flops, [(1e15, "PFLOPS"), (1e12, "TFLOPS"), (1e9, "GFLOPS"), (1.0, "FLOPS")])


def _validator(fn: Callable[[object, str], float]) -> BeforeValidator:
    def run(v: object, info: object = None) -> float:
        name = getattr(info, "field_name", None) or fn.__name__.removeprefix("parse_")
        return fn(v, name)

    return BeforeValidator(run)


Bytes = Annotated[float, _validator(parse_bytes)]
BytesPerSecond = Annotated[float, _validator(parse_bandwidth)]
Seconds = Annotated[float, _validator(parse_duration)]
Tokens = Annotated[float, _validator(parse_tokens)]
FlopsPerSecond = Annotated[float, _validator(parse_flops)]
Watts = Annotated[float, _validator(parse_power)]
RatePerSecond = Annotated[float, _validator(parse_rate)]


def _plain_number(kind: str) -> BeforeValidator:
    """Refuse booleans (``true`` is not 1) and non-finite or overflowing numbers before pydantic's coercion."""

    def run(v: object, info: object = None) -> object:
        name = getattr(info, "field_name", None) or kind
        if isinstance(v, bool):
            raise InputError(name, v, f"expected a {kind}, not a boolean")
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(name, v, f"expected a finite {kind}")
        if isinstance(v, int) and abs(v) > 2**63:
            raise InputError(name, v, f"expected a {kind} below 2**63")
        return v

    return BeforeValidator(run)


#: A finite real number (booleans, NaN and inf refused); numbers with a unit use the aliases above.
Real = Annotated[float, _plain_number("number"), AllowInfNan(False)]
#: A whole count (booleans refused, as are floats with a fraction: pydantic's lax int rule).
Count = Annotated[int, _plain_number("whole number")]
