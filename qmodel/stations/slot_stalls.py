"""Prefill stalls of a decode life in a full batch (colocated prefill-priority engine with a slot cap).

A prefill-priority engine prefills a waiting prompt only when it can admit it: a slot is free
(``max_batch``) and its prompt + output fit the free KV. Below the cap every arrival starts a
prefill busy period at once (the clustered stalls of
:func:`qmodel.stations.iteration_stalls.busy_period_stalls`) and the prompts queued behind the
request when its own prefill ends each start one before its second token (the inspection term
S_0). In a full batch neither happens: arrivals wait, and a prompt is admitted only when a resident
finishes, one prefill iteration of the prompts that the freed slot admits (one). So while the batch
is full the stalls a tagged resident meets are the departures of the *other* residents, each a lone
single-prompt prefill, and none of the prompts queued behind it stall its second token.

Per decode life of L - 1 steps, with the batch full for a share f of it:

* busy-period stalls at rate factor (1 - f)(1 - rho_p)/m on the life D = (L - 1) t_d/(1 - rho_p)
  (the non-full share of :func:`stall_tpot`'s form, m the burst mean);
* lone prefills T_1(P) of one prompt, as many as the other residents' departures: a full batch of
  c residents completes c/E[L - 1] sequences a decode step, c - 1 of them others, so
  f (L - 1)(c - 1)/E[L - 1] of them (Poisson count). As a rate factor on λ D:
  f (c - 1)(1 - rho_p) / (λ E[L - 1] t_d(c));
* the S_0 term of prompts queued behind the request's prefill, with probability 1 - f.

f is the share of a resident's time spent in a full batch: a resident sees the population n with
weight min(n, c) (it is one of them), so f = c P(n >= c) / E[min(n, c)] of the decode chain
(P(n >= c) including the waiting tail). With c = 1 (``max_batch`` 1) f = 1 and no stall remains:
TPOT is t_d(1) exactly, as the replay has it (a lone slot is never interrupted; the prefill wait
falls on the queue, in TTFT). Below the cap f -> 0 and the form is the unchanged busy-period one.

Applied where ``max_batch`` sets the cap. Where the KV memory binds first the pool is full at a
random resident count (the soft wall of :mod:`qmodel.stations.admission`), not at the chain's cap
floor(KV / E[P + L]), so P(n >= cap) is not the full share there; those pools keep the busy-period
form (with the chain's f, the corpus-ci KV-bound case c0021 moved TPOT p50 +6% -> +11%).

Measured: docs/validation.md, "Colocated TPOT in a full batch".
"""

from __future__ import annotations

import numpy as np

__all__ = ["full_share", "full_batch_stalls"]

_POINTS = 2048


def full_share(pi: np.ndarray, tail: float, cap: int | None) -> float:
    """f = c P(n >= c) / E[min(n, c)]: the share of a resident's time in a full batch (module doc).

    ``pi[0..m]`` (m <= cap) and ``tail`` (mass beyond m) from :meth:`GPSChain.solve`; 0 without a cap
    or where the chain was truncated below it."""
    if cap is None or len(pi) - 1 < cap:
        return 0.0
    n = np.minimum(np.arange(len(pi), dtype=float), cap)
    at_cap = float(pi[cap]) + float(tail)
    busy = float(np.dot(n, pi)) + cap * float(tail)
    return min(cap * at_cap / busy, 1.0) if busy > 0 else 0.0


def _mix(parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Equal-weight sample of the mixture of samples with the given (unnormalised) weights (mid-point
    quantiles of each part, as many points as its share of :data:`_POINTS`), rescaled to the
    mixture's exact mean."""
    total = sum(w for _, w in parts)
    out = []
    for x, w in parts:
        k = int(round(_POINTS * w / total))
        if k > 0:
            out.append(np.quantile(x, (np.arange(k) + 0.5) / k))
    mix = np.concatenate(out)
    mean = sum(w * float(np.mean(x)) for x, w in parts) / total
    got = float(mix.mean())
    return mix * (mean / got) if got > 0 else mix


def full_batch_stalls(f: float, bp: np.ndarray, bp_rate: float, own_bp: np.ndarray, single: np.ndarray,
                      lam: float, rho_p: float, cap: int, mean_steps: float, step_full_s: float
                      ) -> tuple[np.ndarray, float, np.ndarray]:
    """(life jumps, life rate factor, own jumps) for :func:`stall_tpot` (module doc).

    ``bp``/``bp_rate``: the busy-period stalls and their rate factor below the cap; ``own_bp`` the
    S_0 jumps; ``single`` the lone one-prompt prefill times T_1(P); ``mean_steps`` E[L - 1];
    ``step_full_s`` t_d(c). f = 0 returns the inputs unchanged."""
    if f <= 0.0:
        return bp, bp_rate, own_bp
    r_bp = bp_rate * (1.0 - f)
    r_one = f * (cap - 1) * (1.0 - rho_p) / (lam * max(mean_steps, 1e-12) * step_full_s)
    if r_bp + r_one <= 0.0:
        life, rate = np.zeros(1), 0.0
    else:
        life = _mix([(bp, r_bp), (single, r_one)])
        rate = r_bp + r_one
    own = _mix([(own_bp, 1.0 - f), (np.zeros(1), f)]) if f < 1.0 else np.zeros(1)
    return life, rate, own
