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

Where ``max_batch`` sets the cap, M = c. Where the KV memory binds first the pool is full at a
random resident count M, the soft wall of :mod:`qmodel.stations.admission` (normal about the
saturated schedule's mean batch), not at the chain's cap floor(KV / E[P + L]); f then weighs the
decode chain's population n against that M, f = sum_n pi(n) E[M 1(M <= n)] / sum_n pi(n) E[min(n, M)]
(with the chain's P(n >= cap) instead, corpus-ci c0021 moved TPOT p50 +6% -> +11%; with the wall's
own population chain, whose blocked states run at the saturated rate, f read 0.67 on c0021 where
the replay's resident time with a prompt waiting for memory is 0.08). A departure at the wall
frees a random amount of memory that admits zero, one or several prompts, so their count is not
the other residents' departures; only their long-run work is fixed (every arrival is prefilled):
the lone prefills carry the work the busy-period form has on the share f, at rate factor
f bp_rate E[B] / E[T_1(P)] (with the departure count instead, corpus-ci c0021/c0032 TPOT p50
+3.2/-3.9% -> +9.7/-7.2%; work-conserving: +2.8/-4.2%).

Measured: docs/validation.md, "Colocated TPOT in a full batch".
"""

from __future__ import annotations

import numpy as np

__all__ = ["full_share", "pool_full_share", "full_batch_stalls"]

_POINTS = 2048


def full_share(pi: np.ndarray, tail: float, cap: int | None, wall_pmf: np.ndarray | None = None) -> float:
    """f, the share of a resident's time in a full batch (module doc).

    ``pi[0..m]`` and ``tail`` (mass beyond m) from :meth:`GPSChain.solve`. The batch is full at a
    resident count M: the slot cap c (``wall_pmf`` None; f = c P(n >= c) / E[min(n, c)], 0 without a
    cap or where the chain was truncated below it), or the KV soft wall's random M (``wall_pmf``:
    P(M = k), k = 0..top). A resident sees the population n with weight min(n, M) and the batch is
    full when M <= n, so f = sum_n pi(n) E[M 1(M <= n)] / sum_n pi(n) E[min(n, M)], the tail full."""
    if wall_pmf is None:
        if cap is None or len(pi) - 1 < cap:
            return 0.0
        wall_pmf = np.zeros(cap + 1)
        wall_pmf[cap] = 1.0
    pm = np.asarray(wall_pmf, dtype=float)
    n = np.arange(len(pi))
    k = np.arange(len(pm), dtype=float)
    at_wall = np.cumsum(k * pm)[np.minimum(n, len(pm) - 1)]  # E[M 1(M <= n)]
    above = np.maximum(1.0 - np.cumsum(pm), 0.0)[np.minimum(n, len(pm) - 1)]  # P(M > n)
    em = float(np.dot(k, pm))
    busy = float(np.dot(pi, at_wall + n * above)) + tail * em
    return min(float(np.dot(pi, at_wall)) + tail * em, busy) / busy if busy > 0 else 0.0


def pool_full_share(pi: np.ndarray, tail: float, rc: float, cap: int | None, wall_pmf: np.ndarray | None
                    ) -> tuple[float, int | None]:
    """(f, the ``cap`` argument of :func:`full_batch_stalls`) of a colocated pool: a batch full at the
    max_batch ``cap`` (the decode chain capped there), else at the KV soft wall's random count M
    (``wall_pmf``; cap None: work-conserving lone prefills; the chain's geometric tail beyond its own
    cap, ratio ``rc``, spelled out up to M's top), else never full: (0, 1)."""
    if cap is not None:
        return full_share(pi, tail, cap), cap
    if wall_pmf is None:
        return 0.0, 1
    if rc > 0.0 and len(wall_pmf) > len(pi):
        ext = pi[-1] * rc ** np.arange(1, len(wall_pmf) - len(pi) + 1)
        pi, tail = np.concatenate([pi, ext]), max(tail - float(ext.sum()), 0.0)
    return full_share(pi, tail, None, wall_pmf), None


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
                      lam: float, rho_p: float, cap: int | None, mean_steps: float, step_full_s: float
                      ) -> tuple[np.ndarray, float, np.ndarray]:
    """(life jumps, life rate factor, own jumps) for :func:`stall_tpot` (module doc).

    ``bp``/``bp_rate``: the busy-period stalls and their rate factor below the cap; ``own_bp`` the
    S_0 jumps; ``single`` the lone one-prompt prefill times T_1(P); ``mean_steps`` E[L - 1];
    ``step_full_s`` t_d(c). ``cap`` None (the KV soft wall): the lone prefills carry the work the
    busy-period form has on the share f, f bp_rate E[bp] / E[T_1] of them (module doc).
    f = 0 returns the inputs unchanged."""
    if f <= 0.0:
        return bp, bp_rate, own_bp
    r_bp = bp_rate * (1.0 - f)
    if cap is None:
        r_one = f * bp_rate * float(np.mean(bp)) / max(float(np.mean(single)), 1e-300)
    else:
        r_one = f * (cap - 1) * (1.0 - rho_p) / (lam * max(mean_steps, 1e-12) * step_full_s)
    if r_bp + r_one <= 0.0:
        life, rate = np.zeros(1), 0.0
    else:
        life = _mix([(bp, r_bp), (single, r_one)])
        rate = r_bp + r_one
    own = _mix([(own_bp, 1.0 - f), (np.zeros(1), f)]) if f < 1.0 else np.zeros(1)
    return life, rate, own
