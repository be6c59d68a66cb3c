"""Closed forms, defined once in sympy and lambdified, with ``explain`` for ``--explain``.

Each formula is a named sympy expression over named parameters (SI units):

==================  ==================================================  ==========================
name                formula                                             parameters
==================  ==================================================  ==========================
pk_mean_wait        λE[S²] / (2(1 − λE[S]))   (Pollaczek–Khinchine)     lam, es, es2
distserve_ttft      D + λD² / (2(1 − λD))     (M/D/1 prefill, DistServe)  lam, d
decode_tpot         (a + β) / (1 − x),  x = λE[L]β   (GPS decode)       a, beta, lam, el
decode_max_rate     1 / (E[L]β)               (decode stability x < 1)  beta, el
kv_bytes_per_token  2 · layers · kv_heads · head_dim · bits/8          layers, kv_heads, head_dim, bits
link_bandwidth      kv_bytes_per_token · E[prompt] · λ                 kv_bytes_per_token, mean_prompt, lam
layerwise_exposed   max(X/(Cℓ), X/C − T_p(1 − 1/ℓ))                     x, c, layers, tp
==================  ==================================================  ==========================

sympy is imported only inside functions: ``import qmodel`` stays light.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

from qmodel.errors import InputError

__all__ = ["FORMULAS", "expression", "function", "evaluate", "explain"]

#: name -> (parameter names in call order, result symbol, unit, one-line description)
FORMULAS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "pk_mean_wait": (("lam", "es", "es2"), "W", "s", "M/G/1 mean wait (Pollaczek-Khinchine)"),
    "distserve_ttft": (("lam", "d"), "TTFT", "s", "mean prefill TTFT of one M/D/1 instance (DistServe)"),
    "decode_tpot": (("a", "beta", "lam", "el"), "TPOT", "s", "mean TPOT of a GPS decode instance, t(n) = a + beta n"),
    "decode_max_rate": (("beta", "el"), "lambda_max", "req/s", "decode stability limit: lam E[L] beta < 1"),
    "kv_bytes_per_token": (("layers", "kv_heads", "head_dim", "bits"), "kv", "B", "KV-cache bytes per token (K and V, all layers)"),
    "link_bandwidth": (("kv_bytes_per_token", "mean_prompt", "lam"), "BW", "B/s", "link bandwidth that hides the KV handoff"),
    "layerwise_exposed": (("x", "c", "layers", "tp"), "T_exp", "s", "exposed time of a layer-wise KV transfer"),
}

# Pretty names for the parameters in printed formulas.
_LATEX_NAMES = {
    "lam": "lambda", "es": "E[S]", "es2": "E[S^2]", "d": "D", "a": "a", "beta": "beta", "el": "E[L]",
    "layers": "ell", "kv_heads": "kv_heads", "head_dim": "head_dim", "bits": "bits",
    "kv_bytes_per_token": "kv_bytes_per_token", "mean_prompt": "E[P]", "x": "X", "c": "C", "tp": "T_p",
}


def _symbols(names: tuple[str, ...]) -> dict[str, Any]:
    import sympy as sp

    return {n: sp.Symbol(_LATEX_NAMES.get(n, n), positive=True) for n in names}


@lru_cache(maxsize=None)
def expression(name: str) -> Any:
    """The sympy expression of formula ``name`` (symbols carry the printed parameter names)."""
    import sympy as sp

    if name not in FORMULAS:
        raise InputError("formula", name, f"one of {', '.join(sorted(FORMULAS))}")
    # Unevaluated, so printed formulas keep the textbook shape (sympy would distribute 2(1 − ρ)).
    with sp.evaluate(False):
        return _build(name, _symbols(FORMULAS[name][0]))


def _build(name: str, s: dict[str, Any]) -> Any:
    import sympy as sp

    if name == "pk_mean_wait":
        return s["lam"] * s["es2"] / (2 * (1 - s["lam"] * s["es"]))
    if name == "distserve_ttft":
        return s["d"] + s["lam"] * s["d"] ** 2 / (2 * (1 - s["lam"] * s["d"]))
    if name == "decode_tpot":
        x = s["lam"] * s["el"] * s["beta"]
        return (s["a"] + s["beta"]) / (1 - x)
    if name == "decode_max_rate":
        return 1 / (s["el"] * s["beta"])
    if name == "kv_bytes_per_token":
        return 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * s["bits"] / 8
    if name == "link_bandwidth":
        return s["kv_bytes_per_token"] * s["mean_prompt"] * s["lam"]
    # layerwise_exposed
    t = s["x"] / s["c"]
    return sp.Max(t / s["layers"], t - s["tp"] * (1 - 1 / s["layers"]))


@lru_cache(maxsize=None)
def function(name: str) -> Callable[..., Any]:
    """numpy function of the parameters in ``FORMULAS[name][0]`` order (lambdified once)."""
    import sympy as sp

    expr = expression(name)
    s = _symbols(FORMULAS[name][0])
    return sp.lambdify([s[n] for n in FORMULAS[name][0]], expr, modules="numpy")


def _check_values(name: str, values: dict[str, float]) -> list[float]:
    params = FORMULAS[name][0]
    missing = [p for p in params if p not in values]
    extra = [k for k in values if k not in params]
    if missing or extra:
        raise InputError(f"{name} parameters", sorted(values), f"exactly {', '.join(params)}")
    out = []
    for p in params:
        v = float(values[p])
        if not math.isfinite(v):
            raise InputError(f"{name}.{p}", values[p], "must be a finite number")
        out.append(v)
    return out


def _stability(name: str, vals: dict[str, float]) -> None:
    load = None
    if name == "pk_mean_wait":
        load = vals["lam"] * vals["es"]
    elif name == "distserve_ttft":
        load = vals["lam"] * vals["d"]
    elif name == "decode_tpot":
        load = vals["lam"] * vals["el"] * vals["beta"]
    if load is not None and load >= 1.0:
        from qmodel.errors import UnstableError

        raise UnstableError(name, load, vals["lam"], vals["lam"] / load)


def evaluate(name: str, **values: float) -> float:
    """Value of formula ``name`` at the given parameters (UnstableError when its load is >= 1)."""
    if name not in FORMULAS:
        raise InputError("formula", name, f"one of {', '.join(sorted(FORMULAS))}")
    args = _check_values(name, values)
    _stability(name, dict(zip(FORMULAS[name][0], args)))
    return float(function(name)(*args))


def explain(name: str, pretty: bool = False, **values: float) -> str:
    """The formula, the scenario's numbers substituted, and the result, as text for ``--explain``."""
    import sympy as sp

    params, lhs, unit, desc = (FORMULAS[name] if name in FORMULAS else (None, None, None, None))
    if params is None:
        raise InputError("formula", name, f"one of {', '.join(sorted(FORMULAS))}")
    args = _check_values(name, values)
    expr = expression(name)
    lhs_sym = sp.Symbol(lhs)
    form = sp.pretty(sp.Eq(lhs_sym, expr), use_unicode=True) if pretty else f"{lhs} = {sp.sstr(expr)}"
    s = _symbols(params)
    with sp.evaluate(False):
        substituted = expr.subs({s[p]: sp.Float(v, 6) for p, v in zip(params, args)})
    value = evaluate(name, **values)
    where = ", ".join(f"{_LATEX_NAMES.get(p, p)} = {v:.6g}" for p, v in zip(params, args))
    return (f"{desc}\n{form}\n  where {where}\n  {lhs} = {sp.sstr(substituted)}\n"
            f"  {lhs} = {value:.6g} {unit}")
