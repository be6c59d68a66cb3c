"""A tiny closed-form evaluator for planner tests (no stations, no engine): M/M/1-style pools.

Per instance of ``tp`` GPUs of speed s (h100-sxm = 1):
  prefill service rate  mu_p = P0 * s * tp**0.9   (req/s), TTFT of one request ~ Exp(mu_p - lam/c)
  decode capacity       mu_d = D0 * s * tp**0.8   (req/s), TPOT = t0 / (s tp**0.5) / (1 - rho_d)
  KV link               mu_k = K0 * link factor   (req/s per prefill instance)
  colocated / chunked:  one pool with 1/mu = 1/mu_p + 1/mu_d; chunked trades TTFT for TPOT.
Everything is monotone in rates and instance counts, as the planner assumes of the engine.
"""

from __future__ import annotations

import math

from qmodel.planner.evaluate import Evaluator, PlanMetrics
from qmodel.planner.space import PlanSpec

SPEED = {"h100-sxm": 1.0, "a100-80gb-sxm": 0.5, "l4": 0.12, "h200-sxm": 1.3, "a100-80gb-pcie": 0.45}
LINK = {"ib-ndr-400": 1.0, "roce-4x200": 1.0, "eth-25g-tcp": 0.06, "eth-100g-tcp": 0.25, "nvlink-4": 4.0}
MIN_TP = {"l4": 2}  # "the model does not fit" below this TP


class FakeEvaluator(Evaluator):
    def __init__(self, scenario, P0: float = 4.0, D0: float = 6.0, K0: float = 20.0, t0: float = 0.03,
                 chunk_tpot_gain: float = 0.7) -> None:
        self.scenario = scenario
        self.P0, self.D0, self.K0, self.t0, self.gain = P0, D0, K0, t0, chunk_tpot_gain
        self.solves = 0

    @property
    def key(self) -> str:
        return f"fake:{self.P0}:{self.D0}:{self.K0}:{self.t0}:{self.gain}:{self.scenario.slo!r}"

    def _mu(self, gpu: str, tp: int):
        s = SPEED[gpu]
        return self.P0 * s * tp ** 0.9, self.D0 * s * tp ** 0.8, self.t0 / (s * tp ** 0.5)

    def pool_issue(self, role, gpu, tp):
        if tp < MIN_TP.get(gpu, 1):
            return f"cannot run: {gpu} TP{tp} too small"
        if tp > 8:
            return "cannot run: tp > 8"
        return None

    def limits(self, plan: PlanSpec):
        f = plan.family
        d = plan.decode
        mp, md, _ = self._mu(d.gpu, d.tp)
        if f.topology == "disaggregated":
            p = plan.prefill
            mpp, _, _ = self._mu(p.gpu, p.tp)
            return [(mpp * p.instances, "prefill"), (self.K0 * LINK[f.link] * p.instances, "kv_transfer"),
                    (md * d.instances, "decode")]
        mu = 1.0 / (1.0 / mp + 1.0 / md)
        if f.topology == "chunked":
            mu *= 0.95
        return [(mu * d.instances, f.topology)]

    def _parts(self, plan: PlanSpec, rate: float):
        f = plan.family
        d = plan.decode
        _, _, t = self._mu(d.gpu, d.tp)
        cap = min(self.limits(plan))[0]
        if rate >= cap:
            return None
        slo = self.scenario.slo
        if f.topology == "disaggregated":
            p = plan.prefill
            mpp, md, _ = self._mu(p.gpu, p.tp)[0], self._mu(d.gpu, d.tp)[1], None
            ttft_rate = mpp - rate / p.instances
            rho_d = rate / (md * d.instances)
            tpot = t / (1.0 - rho_d)
        else:
            rho = rate / cap
            ttft_rate = cap / d.instances * (1 - rho) * (0.5 if f.topology == "chunked" else 1.0)
            tpot = t / (1 - rho) * (self.gain if f.topology == "chunked" else 1.4)
        a = 1.0 - math.exp(-ttft_rate * slo.ttft_s)
        b = 1.0 if tpot <= slo.tpot_s else 0.0
        return a, b, math.log(10) / ttft_rate, tpot

    def attainment(self, plan, rate):
        self.solves += 1
        parts = self._parts(plan, rate)
        return 0.0 if parts is None else parts[0] * parts[1]

    def metrics(self, plan, rate):
        a, b, ttft90, tpot = self._parts(plan, rate)
        return PlanMetrics(rate, a * b, ttft90, tpot, "TTFT binds" if a < b else "TPOT binds", "fake")

    def knee(self, plan, lam_max):
        return 0.8 * lam_max

    def mean_output_tokens(self):
        return 200.0

    def mean_prompt_tokens(self):
        return 1000.0
