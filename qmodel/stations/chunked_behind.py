"""The chunked engine's first-token iteration: the chunks of later prompts that share it.

A chunked prompt's first token comes at the end of the iteration that computes its last chunk.
The backlog queue (:mod:`qmodel.stations.chunked`) charges the tagged prompt the work ahead of it
(the P-K wait W) and its own chunks; the rest of that last iteration is the chunks of the prompts
*behind* it (FCFS) admitted into the same iteration: those that arrived between the tagged
arrival and the start of its last iteration, up to the room its last chunk leaves in the budget.
With n decodes, c = B - n prompt tokens per iteration and prompt tokens arriving at lam E[P] per
second:

* the own last chunk r(P) = P - c floor((P - 1)/c) (1..c tokens); the iterations before it take
  pre(P) = floor((P - 1)/c) tau, tau the full mixed iteration;
* the room behind it: room(P) = min((1 - rho_c)(c - r(P)) + rho_c c/2, f E[P]) (a prompt that meets
  no backlog starts an iteration; behind a backlog its end lies anywhere in a packed iteration; a
  later prompt is admitted only into a free slot, f = cap - n - 1 of them);
* the tokens behind: b = E[min(room(P), E[P] N)], N ~ Poisson(lam (W + pre(P))) the prompts that
  arrived in that window (whole prompts: where they are longer than the room, one arrival fills
  it, and none leaves it empty; :func:`expected_fill`), taken in two parts: the arrivals during
  its own earlier iterations, b_pre(P) (window pre(P)), per prompt length, and the arrivals during
  its wait, b_W(W) (window W, the room left room' = E[room - b_pre]), a monotone map of the wait's law:
  a prompt that did not wait has none of those behind it (the law keeps its atom at 0), one that
  waited long has the iteration's room filled;
* their time: the marginal cost of those tokens in the iteration,
  T_p(n + r + b, a + b min(b, E[P]), 1 + b/E[P]) - T_p(n + r, a, 1), a = r^2 + 2 r (P - r) the own
  chunk's attention (the later prompts' first chunks attend over themselves), taken with
  probability 1 - e^(-m) that anyone arrived (m the window's mean arrivals) at the fill given that,
  b = E[fill]/(1 - e^(-m)): the step time is concave in the tokens where it is memory-bound or a
  mixture-of-experts layer reads more experts as tokens grow, so the cost at the mean fill overstated it.

This replaced the fluid term "half a full mixed iteration with probability rho_c", which holds
only where the budget is packed: with budgets far above the prompts (gated batches) it charged a
16384-token iteration to every prompt and read TTFT p50 +11.5..+38.7% high across load bands
(docs/validation.md, "Chunked TTFT p50: the first-token iteration").
"""

from __future__ import annotations

import numpy as np

from qmodel.dist import GridDist
from qmodel.perf.base import ServiceTimeModel
from qmodel.special import pdtr, pdtrc

__all__ = ["expected_fill", "first_iteration"]


def expected_fill(room: np.ndarray, arrivals: np.ndarray, mean_p: float) -> np.ndarray:
    """E[min(room, E[P] N)], N ~ Poisson(arrivals): the tokens of later prompts that fill the room
    (whole prompts of the mean length). With K = ceil(room/E[P]) and k p_k = m p_(k-1):
    E = E[P] m P(N <= K - 2) + room P(N >= K)."""
    room = np.maximum(np.asarray(room, dtype=float), 0.0)
    m = np.maximum(np.asarray(arrivals, dtype=float), 0.0)
    k = np.maximum(np.ceil(room / mean_p), 1.0)
    below = np.where(k >= 2.0, mean_p * m * pdtr(np.maximum(k - 2.0, 0.0), m), 0.0)
    return np.minimum(below + room * pdtrc(k - 1.0, m), room)


def _marginal(service: ServiceTimeModel, n: float, mean_p: float, r: np.ndarray, a: np.ndarray,
              b: np.ndarray) -> np.ndarray:
    """Seconds b more prompt tokens add to an iteration of n decodes holding the own chunk r
    (its attention a); the later prompts' first chunks attend over themselves."""
    t1 = np.asarray(service.prefill_time_s(n + r + b, a + b * np.minimum(b, mean_p), 1.0 + b / mean_p), dtype=float)
    t0 = np.asarray(service.prefill_time_s(n + r, a, 1.0), dtype=float)
    return np.maximum(t1 - t0, 0.0)


def _fill_time(service: ServiceTimeModel, n: float, mean_p: float, r: np.ndarray, a: np.ndarray, room: np.ndarray,
               arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, tokens) of the later prompts' chunks: with probability 1 - e^(-m) someone arrived,
    and then the room holds E[fill]/(1 - e^(-m)) of their tokens (the step time is not linear in the
    tokens: a mixture-of-experts layer reads more experts as tokens grow, so the mean time is taken
    over whether anyone came, not at the mean fill)."""
    fill = expected_fill(room, arrivals, mean_p)
    p_any = -np.expm1(-np.maximum(np.asarray(arrivals, dtype=float), 0.0))
    b = np.where(p_any > 0.0, fill / np.maximum(p_any, 1e-300), 0.0)
    return p_any * _marginal(service, n, mean_p, r, a, b), fill


def first_iteration(service: ServiceTimeModel, prompts: np.ndarray, weights: np.ndarray, n: float, budget: int,
                    token_rate: float, tau_s: float, rho_c: float, mean_p: float, free_slots: float,
                    wait: GridDist) -> tuple[np.ndarray, GridDist]:
    """(seconds behind the own chunks per prompt length, the wait's law with the chunks of the
    prompts that arrived during it added), module doc.

    ``prompts``/``weights``: distinct prompt lengths and their shares; ``n``: decodes in the
    iteration (the mean state); ``token_rate``: prompt tokens arriving per second at the instance,
    lam E[P]; ``tau_s``: one full mixed iteration; ``rho_c``: the prefill share; ``wait``: the
    backlog wait W; ``free_slots``: the slots left beside the decodes and the own prompt (a later
    prompt is admitted only into a free slot).
    """
    p = np.asarray(prompts, dtype=float)
    c = max(float(budget) - n, 1.0)
    full = np.floor((p - 1.0) / c)
    r = p - c * full
    a = r * r + 2.0 * r * (p - r)
    room = np.minimum((1.0 - rho_c) * (c - r) + rho_c * 0.5 * c, free_slots * mean_p)
    lam = token_rate / mean_p
    t_pre, b_pre = _fill_time(service, n, mean_p, r, a, room, lam * full * tau_s)
    w = np.asarray(weights, dtype=float)
    room_left = float(np.dot(w, room - b_pre))
    r0, a0 = float(np.dot(w, r + b_pre)), float(np.dot(w, a + b_pre * np.minimum(b_pre, mean_p)))
    if room_left <= 0.0 or token_rate <= 0.0 or wait.mean_s <= 0.0:
        return t_pre, wait
    x = np.arange(wait.n) * wait.dx
    shift = _fill_time(service, n, mean_p, np.full_like(x, r0), np.full_like(x, a0), np.full_like(x, room_left),
                       lam * x)[0]
    k = np.ceil((x + shift) / wait.dx - 1e-9).astype(np.int64)
    pmf = np.bincount(k, weights=wait.pmf, minlength=int(k.max()) + 1)
    # the mass past the grid waited longest: the room is full there
    full_shift = float(_fill_time(service, n, mean_p, np.array(r0), np.array(a0), np.array(room_left),
                                  np.array(lam * x[-1]))[0])
    mean = wait.mean_s + float(np.dot(wait.pmf, shift)) + wait.tail * full_shift
    return t_pre, GridDist(wait.dx, pmf, mean, tail=wait.tail, tail_rate=wait.tail_rate, exact=False)
