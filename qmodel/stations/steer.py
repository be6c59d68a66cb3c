"""Least-loaded dispatch by outstanding tokens, seen by a FCFS prompt backlog (chunked engines).

The replay's ``least_loaded`` sends an arrival to the instance with the fewest outstanding tokens:
its waiting prompts plus the KV reserved by its residents (prompt + output each). Most of that load
is the residents' reservations, which say little about the prompt backlog; so least_loaded does not
behave as join-the-shortest-queue on prefill work (Erlang C / c, :func:`jsq_wait`), which is what
made the chunked TTFT wait 40% low at half load on llama3-8b-chunked-h100 (docs/methods.md).

Model: each instance's backlog V_i (seconds of prompt work, the single-instance FCFS wait law) adds
V_i / tau tokens to its load (tau: seconds of backlog per prompt token); the rest of the loads
differ by D ~ Laplace of scale delta = E[S^2]/E[S], S = P + L, the tokens a request adds (the
balance the colocated station uses, :class:`qmodel.stations.colocated.ColocatedStation`). The
arrival joins instance 1 when V_1/tau + D < V_j/tau for every other j (taken independent), so the
wait met has density

    f_c(w) = f(w) g(w)^{c-1} / Z,   g(w) = P(w/tau + D < V'/tau) = E_V'[F_D((V' - w)/tau)],

normalised (Z = 1/c exactly for c = 2 by symmetry). delta -> 0 is the exact JSQ on work, delta ->
inf the random split.
"""

from __future__ import annotations

import math

import numpy as np
from qmodel.convolution import linear_convolution
from qmodel.dist import GridDist

__all__ = ["steered_wait"]


def steered_wait(wait: GridDist, instances: int, tau_s_per_token: float, delta_tokens: float) -> GridDist:
    """The FCFS wait met under least-loaded dispatch over ``instances`` (formula in the module doc).

    ``wait``: one instance's wait law (its virtual backlog, PASTA); the grid's tail mass beyond the
    last point is steered with the last point's weight.
    """
    if instances <= 1 or not (delta_tokens > 0 and tau_s_per_token > 0):
        return wait
    p = np.asarray(wait.pmf, dtype=float)
    total = float(p.sum()) + float(wait.tail)
    f = np.where(p > 1e-250 * total, p / max(total, 1e-300), 0.0)
    tail = float(wait.tail) / max(total, 1e-300)
    n = len(f)
    r = math.exp(-wait.dx / (tau_s_per_token * delta_tokens))  # e^{-(one grid step)/delta} in tokens
    # g_i = sum_j f_j F_D((j - i) step): F_D = 1 - e^{-k}/2 above, e^{k}/2 below, two geometric
    # filters: A_i = sum_{j>=i} f_j r^{j-i}, Bq_i = sum_{j<i} f_j r^{i-j}
    a = _geometric_filter(f[::-1], r)[::-1]
    bq = r * _geometric_filter(np.concatenate([[0.0], f[:-1]]), r)
    sf = np.cumsum(f[::-1])[::-1]
    # the tail lies beyond every grid point: it counts as a larger load everywhere (F_D ~ 1)
    g = np.clip(sf - 0.5 * a + 0.5 * bq + tail, 0.0, 1.0)
    w = f * g ** (instances - 1)
    w_tail = tail * float(g[-1]) ** (instances - 1)
    z = float(w.sum()) + w_tail
    pmf, tail_new = w / z, w_tail / z
    pmf[pmf < 1e-250] = 0.0  # no subnormals downstream (they slow every later FFT ~10x)
    x = np.arange(n) * wait.dx
    mean = float((x * pmf).sum())  # (not np.dot: a threaded BLAS call costs ms on a busy machine)
    if tail_new > 0:
        mean += tail_new * (x[-1] + (1.0 / wait.tail_rate if np.isfinite(wait.tail_rate) else 0.0))
    return GridDist(wait.dx, pmf, mean, tail=tail_new, tail_rate=wait.tail_rate, exact=False)


def _geometric_filter(x: np.ndarray, r: float) -> np.ndarray:
    """y_i = sum_{k<=i} x_k r^(i-k) (the first-order recursion y_i = x_i + r y_{i-1}), as a
    convolution with r^j cut where r^j < 1e-18 (numpy only: scipy.signal would add ~0.6 s to the
    first chunked solve's imports)."""
    n = len(x)
    length = n if r >= 1.0 else min(n, int(math.ceil(41.5 / -math.log(r))) + 1 if r > 0 else 1)
    kernel = r ** np.arange(length)
    return linear_convolution([x, kernel], n)
