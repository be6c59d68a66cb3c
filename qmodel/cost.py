"""Hourly cost of a deployment and the price of its tokens: the one implementation that goodput,
``plan`` (min-cost, cost budgets, ranked rows), compare and the TUI all call.

Price of one GPU-hour of type ``g``::

    price(g) = scenario.prices[g]          if the scenario gives one (USD per GPU-hour)
             = catalog price_usd_per_hour  otherwise (an on-demand list price with its source and date)
             = None                        if neither exists

Cost per hour of a deployment = sum over pools of price(gpu) x GPUs; None when any pool's GPU has
no price (a partial sum would understate the cost, so nothing is reported instead).

Price of tokens served at the SLO, at goodput ``g`` req/s with mean prompt ``I`` and output ``O``
tokens per request (the prompt counted whole, prefix-cache hits included, as a price sheet bills it)::

    usd_per_million_input_tokens  = cost / (g * I * 3600) * 1e6
    usd_per_million_output_tokens = cost / (g * O * 3600) * 1e6
    usd_per_million_tokens        = cost / (g * (I + O) * 3600) * 1e6

Each figure charges the whole hourly cost to that kind of token, as a dedicated deployment's price
per token is quoted; they are not additive: 1/total = 1/input + 1/output.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TokenPrices", "check_prices", "cost_per_hour_usd", "price_table", "token_prices", "usd_per_million"]


class TokenPrices(BaseModel):
    """USD per million tokens served within the SLO (formulas in the module docstring)."""

    model_config = ConfigDict(frozen=True)

    usd_per_million_input_tokens: float = Field(description="cost/h / (goodput x mean prompt tokens x 3600) x 1e6")
    usd_per_million_output_tokens: float = Field(description="cost/h / (goodput x mean output tokens x 3600) x 1e6")
    usd_per_million_tokens: float = Field(description="cost/h / (goodput x mean (prompt + output) tokens x 3600) x 1e6")


def check_prices(prices: Mapping[str, float] | None) -> dict[str, float]:
    """The scenario's ``prices`` keyed by catalog GPU name. An unknown GPU name is one CatalogError
    naming ``prices.<name>`` with the closest catalog names (the values are checked positive by the
    scenario schema)."""
    from qmodel.registry import load_catalog

    cat = load_catalog()
    return {cat.gpu(name, f"prices.{name}").name: float(v) for name, v in (prices or {}).items()}


def price_table(gpus: Iterable[str], prices: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """price(g) for each GPU name (catalog names; unknown ones raise a CatalogError naming the GPU)."""
    from qmodel.registry import load_catalog

    cat = load_catalog()
    override = check_prices(prices)
    out: dict[str, float | None] = {}
    for g in gpus:
        spec = cat.gpu(g)
        out[spec.name] = override.get(spec.name, spec.price_usd_per_hour)
    return out


def cost_per_hour_usd(pools: Iterable[tuple[str, int]], price: Mapping[str, float | None]) -> float | None:
    """Sum of price(gpu) x GPUs over (gpu name, GPU count) pools; None if any GPU has no price."""
    total = 0.0
    for gpu, n in pools:
        p = price.get(gpu)
        if p is None:
            return None
        total += p * n
    return float(total)


def usd_per_million(cost_usd_per_hour: float | None, goodput_rps: float, tokens_per_request: float) -> float | None:
    """cost/h / (goodput x tokens per request x 3600) x 1e6; None without a cost, a goodput or tokens."""
    if not cost_usd_per_hour or not goodput_rps > 0 or not tokens_per_request > 0:
        return None
    return float(cost_usd_per_hour / (goodput_rps * tokens_per_request * 3600.0) * 1e6)


def token_prices(cost_usd_per_hour: float | None, goodput_rps: float, mean_input_tokens: float,
                 mean_output_tokens: float) -> TokenPrices | None:
    """The three token prices (:func:`usd_per_million` each), or None when any is undefined."""
    vals = [usd_per_million(cost_usd_per_hour, goodput_rps, t)
            for t in (mean_input_tokens, mean_output_tokens, mean_input_tokens + mean_output_tokens)]
    if any(v is None for v in vals):
        return None
    return TokenPrices(usd_per_million_input_tokens=vals[0], usd_per_million_output_tokens=vals[1],
                       usd_per_million_tokens=vals[2])
