"""Small step-level discrete-event simulations used by the station tests as references (test-only).

Each simulation follows the engine at step granularity with Poisson arrivals and a fixed seed:

* :func:`simulate_decode`: continuous-batching decode engine (admission at step boundaries, slot cap);
* :func:`simulate_colocated`: vLLM-v0-like prefill-priority iterations (prefill of everything waiting
  under a token budget, otherwise one decode step);
* :func:`simulate_chunked`: Sarathi-like iterations mixing one token per running sequence with
  prefill chunks under a per-iteration token budget.

They report per-request admission waits / TTFT / TPOT = (t_last - t_first)/(L - 1) and the
time-average number in system, with batch-means standard errors.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from qmodel.perf.base import ServiceTimeModel


class LinearService(ServiceTimeModel):
    """prefill = alpha + gamma * sum_tokens + gamma2 * sum_sq; decode step = a + b n + c * sum_context."""

    kind = "test-linear"

    def __init__(self, a: float, b: float, c: float = 0.0, alpha: float = 0.0, gamma: float = 0.0,
                 gamma2: float = 0.0) -> None:
        self.a, self.b, self.c = a, b, c
        self.alpha, self.gamma, self.gamma2 = alpha, gamma, gamma2

    def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_requests):
        st = np.asarray(sum_tokens, dtype=float)
        return self.alpha + self.gamma * st + self.gamma2 * np.asarray(sum_sq_tokens, dtype=float)

    def decode_step_time_s(self, n_seqs, sum_context_tokens):
        return self.a + self.b * np.asarray(n_seqs, dtype=float) + self.c * np.asarray(sum_context_tokens, dtype=float)

    @property
    def fingerprint(self) -> str:
        return f"linear:{self.a}:{self.b}:{self.c}:{self.alpha}:{self.gamma}:{self.gamma2}"


def batch_means(values: np.ndarray, weights: np.ndarray | None = None, batches: int = 20) -> tuple[float, float]:
    """(mean, standard error) by batch means over consecutive equal-size batches."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    idx = np.array_split(np.arange(len(v)), batches)
    means = np.array([np.dot(v[i], w[i]) / w[i].sum() for i in idx])
    return float(np.dot(v, w) / w.sum()), float(means.std(ddof=1) / math.sqrt(batches))


@dataclass
class DecodeRun:
    mean_n: float
    se_n: float
    wait: np.ndarray  # admission wait per request: arrival -> start of its first step
    tpot: np.ndarray  # per request (L >= 2)
    first_step: np.ndarray


def simulate_decode(rate: float, lengths, step_time, horizon_s: float, seed: int = 0,
                    n_max: int | None = None, warmup_frac: float = 0.1) -> DecodeRun:
    """One decode engine. ``lengths(rng, k)`` draws k output lengths; ``step_time(n)`` seconds.

    At each step boundary the engine admits waiting requests FCFS up to ``n_max``, runs a step of all
    admitted sequences (each emits a token), and releases those that emitted their last token.
    Arrivals during a step wait for the boundary; an idle engine starts a step at the arrival.
    """
    rng = np.random.default_rng(seed)
    n_arr = int(rate * horizon_s * 1.2) + 100
    arr = np.cumsum(rng.exponential(1.0 / rate, n_arr))
    arr = arr[arr < horizon_s]
    Ls = np.asarray(lengths(rng, len(arr)), dtype=np.int64)
    warm = warmup_frac * horizon_s
    t = 0.0
    i = 0  # next arrival index
    queue: deque[int] = deque()
    active = 0
    finish: dict[int, list[int]] = {}  # step index -> requests finishing at that step
    step_no = 0
    start_step = np.zeros(len(arr), dtype=np.int64)
    t_first = np.full(len(arr), np.nan)
    t_last = np.full(len(arr), np.nan)
    t_start = np.full(len(arr), np.nan)
    first_dur = np.full(len(arr), np.nan)
    area_t: list[float] = []
    area_n: list[float] = []
    cap = n_max if n_max is not None else 1 << 60
    while True:
        # arrivals up to the boundary t join the queue
        while i < len(arr) and arr[i] <= t:
            queue.append(i)
            i += 1
        if active == 0 and not queue:
            if i >= len(arr):
                break
            # idle: record N = 0 until the next arrival
            area_t.append(arr[i] - t)
            area_n.append(0.0)
            t = arr[i]
            continue
        newly = []
        while queue and active < cap:
            j = queue.popleft()
            active += 1
            start_step[j] = step_no
            t_start[j] = t
            newly.append(j)
            finish.setdefault(step_no + int(Ls[j]) - 1, []).append(j)
        dt = float(step_time(active))
        # N over the step: active + queued + arrivals during the step (piecewise); use the exact area
        k = i
        n_wait = len(queue)
        area = (active + n_wait) * dt
        while k < len(arr) and arr[k] < t + dt:
            area += t + dt - arr[k]
            k += 1
        area_t.append(dt)
        area_n.append(area / dt)
        t_end = t + dt
        for j in newly:
            t_first[j] = t_end
            first_dur[j] = dt
        done = finish.pop(step_no, [])
        for j in done:
            t_last[j] = t_end
        active -= len(done)
        step_no += 1
        t = t_end
    at = np.asarray(area_t)
    an = np.asarray(area_n)
    tt = np.cumsum(at) - at
    keep = tt >= warm
    mean_n, se_n = batch_means(an[keep], at[keep])
    ok = (arr >= warm) & np.isfinite(t_last)
    multi = ok & (Ls >= 2)
    tpot = (t_last[multi] - t_first[multi]) / (Ls[multi] - 1)
    return DecodeRun(mean_n, se_n, (t_start - arr)[ok], tpot, first_dur[ok])


@dataclass
class EngineRun:
    ttft: np.ndarray
    tpot: np.ndarray  # requests with L >= 2
    mean_running: float  # time-average number of sequences in decode
    prefill_fraction: float  # fraction of time in prefill (or prefill-carrying) iterations
    batch_sizes: np.ndarray


def _arrivals(rate: float, horizon_s: float, rng: np.random.Generator, cv: float = 1.0) -> np.ndarray:
    """Renewal arrivals: exponential gaps (Poisson), or Gamma gaps of shape 1/cv^2 when cv != 1."""
    n = int(rate * horizon_s * 1.2) + 100
    if cv == 1.0:
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
        n2 = int(rate * horizon_s * 1.5) + 100  # bursty gaps: leave room for a slow stretch
        gaps = np.concatenate([gaps, rng.gamma(shape, 1.0 / (rate * shape), n2)])
    arr = np.cumsum(gaps)
    return arr[arr < horizon_s]


class _Pool:
    """One engine's bookkeeping shared by the colocated and chunked simulators: arrivals, the decode
    batch (count, summed context, finish step per request), and the time averages after warm-up."""

    def __init__(self, rate: float, lengths, horizon_s: float, seed: int, warmup_frac: float, arrival_cv: float):
        rng = np.random.default_rng(seed)
        self.arr = _arrivals(rate, horizon_s, rng, arrival_cv)
        self.P, self.L = (np.asarray(v, dtype=np.int64) for v in lengths(rng, len(self.arr)))
        self.nreq = len(self.arr)
        self.t_first = np.full(self.nreq, np.nan)
        self.t_last = np.full(self.nreq, np.nan)
        self.finish: dict[int, list[int]] = {}
        self.running, self.ctx, self.dstep, self.i, self.t = 0, 0.0, 0, 0, 0.0
        self.warm = warmup_frac * horizon_s
        self.area_run = self.t_busy = self.t_obs = 0.0

    def arrivals(self) -> list[int]:
        """Requests arrived by now, in order."""
        out = []
        while self.i < self.nreq and self.arr[self.i] <= self.t:
            out.append(self.i)
            self.i += 1
        return out

    def spend(self, dt: float, busy: bool) -> None:
        """Advance the clock by one iteration of dt (``busy``: it carried prefill work)."""
        if self.t >= self.warm:
            self.area_run += self.running * dt
            if busy:
                self.t_busy += dt
            self.t_obs += dt
        self.t += dt

    def tokens(self) -> None:
        """Every running sequence got a token at the end of the iteration just spent."""
        self.ctx += self.running
        for j in self.finish.pop(self.dstep, []):
            self.t_last[j] = self.t
            self.running -= 1
            self.ctx -= self.P[j] + self.L[j]
        self.dstep += 1

    def first_token(self, j: int) -> None:
        """Request j's prefill ended now: first token, then decode (or done when L = 1)."""
        self.t_first[j] = self.t
        if self.L[j] <= 1:
            self.t_last[j] = self.t
        else:
            self.running += 1
            self.ctx += self.P[j] + 1
            self.finish.setdefault(self.dstep + int(self.L[j]) - 2, []).append(j)

    def decode_step(self, service: ServiceTimeModel) -> None:
        self.spend(float(service.decode_step_time_s(self.running, self.ctx)), False)
        self.tokens()

    def idle(self) -> bool:
        """Jump to the next arrival; False when none is left."""
        if self.i >= self.nreq:
            return False
        if self.t >= self.warm:
            self.t_obs += self.arr[self.i] - self.t
        self.t = self.arr[self.i]
        return True

    def result(self, sizes: np.ndarray) -> EngineRun:
        ok = (self.arr >= self.warm) & np.isfinite(self.t_last)
        multi = ok & (self.L >= 2)
        return EngineRun((self.t_first - self.arr)[ok],
                         (self.t_last[multi] - self.t_first[multi]) / (self.L[multi] - 1),
                         self.area_run / self.t_obs, self.t_busy / self.t_obs, sizes)


def simulate_colocated(rate: float, lengths, service: ServiceTimeModel, horizon_s: float, seed: int = 0,
                       budget_tokens: int = 8192, warmup_frac: float = 0.1, arrival_cv: float = 1.0,
                       max_batch: int | None = None) -> EngineRun:
    """vLLM-v0-like engine: if prompts wait, prefill all of them (FCFS, token budget, >= 1 prompt) in
    one iteration; else one decode step of every running sequence. ``lengths(rng, k)`` -> (P, L).
    The first token is emitted by the prefill; the remaining L - 1 by decode steps. ``max_batch``:
    a prompt is prefilled only into a free slot (running sequences + the iteration's prompts)."""
    e = _Pool(rate, lengths, horizon_s, seed, warmup_frac, arrival_cv)
    P = e.P
    slots = max_batch if max_batch is not None else 1 << 62
    waiting: deque[int] = deque()
    sizes: list[int] = []
    while True:
        waiting.extend(e.arrivals())
        if waiting and e.running < slots:
            batch, tok = [], 0
            while waiting and e.running + len(batch) < slots and (not batch or tok + P[waiting[0]] <= budget_tokens):
                j = waiting.popleft()
                batch.append(j)
                tok += int(P[j])
            pp = P[batch].astype(float)
            if e.t >= e.warm:
                sizes.append(len(batch))
            e.spend(float(service.prefill_time_s(pp.sum(), float(np.dot(pp, pp)), len(batch))), True)
            for j in batch:
                e.first_token(j)
        elif e.running:
            e.decode_step(service)
        elif not e.idle():
            break
    return e.result(np.asarray(sizes))


def simulate_chunked(rate: float, lengths, service: ServiceTimeModel, horizon_s: float, seed: int = 0,
                     budget_tokens: int = 512, warmup_frac: float = 0.1, arrival_cv: float = 1.0) -> EngineRun:
    """Sarathi-like engine with the replay's step-time composition (validation/stations/chunked.py):
    every iteration gives one token to each running sequence; the rest of the budget goes to prompt
    chunks FCFS (the prompt in progress first). A mixed iteration with n decodes (contexts S) and
    chunks c_j over d_j done tokens takes

        prefill_time_s(sum c_j + n, sum (c_j^2 + 2 c_j d_j), k) + decode_step_time_s(n, S) - decode_step_time_s(n, 0)

    and a decode-only iteration decode_step_time_s(n, S). The first token comes at the end of the
    iteration that computes the last prompt token."""
    e = _Pool(rate, lengths, horizon_s, seed, warmup_frac, arrival_cv)
    P = e.P
    backlog: deque[list[int]] = deque()  # [request, tokens done]
    while True:
        backlog.extend([j, 0] for j in e.arrivals())
        room = budget_tokens - e.running
        if backlog and room > 0:
            chunks = []
            for item in backlog:
                if room <= 0:
                    break
                c = min(room, int(P[item[0]]) - item[1])
                chunks.append((item, c))
                room -= c
            s1 = sum(c for _, c in chunks)
            s2 = float(sum(c * c + 2 * c * it[1] for it, c in chunks))
            dt = float(service.prefill_time_s(float(s1 + e.running), s2, float(len(chunks))))
            if e.running:
                dt += float(service.decode_step_time_s(e.running, e.ctx)) - float(service.decode_step_time_s(e.running, 0.0))
            e.spend(dt, True)
            if e.running:
                e.tokens()
            for it, c in chunks:
                it[1] += c
            while backlog and backlog[0][1] >= P[backlog[0][0]]:
                e.first_token(backlog.popleft()[0])
        elif e.running:
            e.decode_step(service)
        elif not e.idle():
            break
    return e.result(np.zeros(0))
