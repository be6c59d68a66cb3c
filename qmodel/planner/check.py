"""``--check K``: replay the top K plans and compare them with the analytic numbers.

All K plans are replayed at one common rate (the target rate; for max-goodput without a target,
the smallest analytic goodput among the K, a rate every one of them is predicted to sustain) with
the same synthetic requests (same seed), so differences come from the plans, not the samples.
Rank agreement is Kendall's tau between analytic and replayed attainment at that rate; per-plan
rows give the relative error of the p90 TTFT and TPOT.
"""

from __future__ import annotations

import math
from typing import Sequence

from qmodel.errors import InputError
from qmodel.planner.plan_result import CheckRow, PlanCheck, PlanRow
from qmodel.planner.space import Family, PlanSpec, Pool
from qmodel.scenario import Scenario

__all__ = ["check_plans", "spec_of"]


def spec_of(row: PlanRow) -> PlanSpec:
    """The PlanSpec behind a ranked row."""
    from qmodel.topology import TOPOLOGIES

    if TOPOLOGIES[row.topology].separate_prefill:
        assert row.prefill is not None
        fam = Family("disaggregated", row.decode.gpu, row.decode.tp, row.prefill.gpu, row.prefill.tp, row.link,
                     row.transfer_mode)
        return fam.plan(row.decode.instances, row.prefill.instances)
    fam = Family(row.topology, row.decode.gpu, row.decode.tp, chunk_tokens=row.chunk_tokens)
    return PlanSpec(fam, Pool(row.decode.gpu, row.decode.tp, row.decode.instances))


def _rel(a: float, b: float) -> float:
    return 0.0 if a == b else (a - b) / b if b > 0 else 0.0


def check_plans(scenario: Scenario, rows: Sequence[PlanRow], *, n_requests: int = 5000, seed: int = 0,
                evaluator=None, rate_per_s: float | None = None) -> PlanCheck:
    from qmodel.planner.evaluate import EngineEvaluator, scenario_for
    from qmodel.validation.replay import replay

    if not rows:
        raise InputError("--check", 0, "at least one plan to replay")
    if n_requests < 100:
        raise InputError("--check-requests", n_requests, "at least 100 requests per replay")
    ev = evaluator or EngineEvaluator(scenario)
    rate = rate_per_s or min(r.rate_per_s for r in rows)
    out: list[CheckRow] = []
    for r in rows:
        spec = spec_of(r)
        m = ev.metrics(spec, rate)
        rep = replay(scenario_for(scenario, spec).with_rate(rate), n_requests=n_requests, seed=seed)
        out.append(CheckRow(rank=r.rank, label=r.label, rate_per_s=rate, analytic_attainment=m.attainment,
                            replay_attainment=float(rep.attainment), analytic_ttft_p90_s=m.ttft_p90_s,
                            replay_ttft_p90_s=float(rep.ttft.p90), analytic_tpot_p90_s=m.tpot_p90_s,
                            replay_tpot_p90_s=float(rep.tpot.p90),
                            ttft_p90_rel_diff=_rel(m.ttft_p90_s, float(rep.ttft.p90)),
                            tpot_p90_rel_diff=_rel(m.tpot_p90_s, float(rep.tpot.p90))))
    tau, p = kendall([c.analytic_attainment for c in out], [c.replay_attainment for c in out])
    worst = max(out, key=lambda c: max(abs(c.ttft_p90_rel_diff), abs(c.tpot_p90_rel_diff)))
    summary = (f"{len(out)} plans replayed at {rate:.4g} req/s ({n_requests} requests, seed {seed}); "
               + ("rank agreement undefined (ties)" if tau is None else f"Kendall tau {tau:+.2f}")
               + f"; largest p90 gap: rank {worst.rank} (TTFT {worst.ttft_p90_rel_diff * 100:+.0f}%, "
                 f"TPOT {worst.tpot_p90_rel_diff * 100:+.0f}%)")
    return PlanCheck(k=len(out), rate_per_s=rate, n_requests=n_requests, seed=seed, kendall_tau=tau, kendall_p_value=p,
                     rows=out, summary=summary)


def kendall(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None]:
    """Kendall's tau-b (scipy.stats, imported here to keep ``import qmodel`` light); None when undefined."""
    if len(a) < 2:
        return None, None
    from scipy.stats import kendalltau

    res = kendalltau(a, b)
    tau, p = float(res.statistic), float(res.pvalue)
    if not (math.isfinite(tau) and math.isfinite(p)):
        return None, None
    return tau, p
