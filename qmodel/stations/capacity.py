"""Saturated capacity of a prefill-priority colocated instance: its schedule under an endless backlog.

With an endless FCFS backlog the engine's choices no longer depend on when requests arrive: at
every step boundary it prefills the waiting head (and the requests behind it, while their new
tokens fit ``max_batch_tokens``, their prompt + output fit the free KV and a slot is free; requests
of one output token finish at the end of that prefill), otherwise it runs decode steps until the
next sequence finishes. So the saturated iteration sequence is a deterministic function of the
length sample and the admission rule, and the capacity is

    lam_sat = (requests completed) / (sum of the iterations' times)

over that sequence: prefill iterations T_p(sum p_i, sum p_i^2, k) and decode steps t_d(n, sum of
contexts). This is the fluid (heavy-traffic) limit of the engine with the batch sizes it really
forms: when KV or the slot cap binds, a prefill iteration holds only the requests whose memory the
last departures freed (1.5-2.3 per iteration on the examples, against the 4-8 a full token budget
holds), and the decode batch is the number of residents whose reserved prompt + output fill the
memory. docs/methods.md ("Colocated stability limit") has the derivation and the check against the
replay's sustained rate.

Evaluated on the station's own sample in a fixed order (a seeded permutation, several passes), the
first fifth of the admissions discarded as warm-up; decode runs are fast-forwarded between
departures (one vectorised step-time call each).
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.pool_inputs import reserved_output as reserved_tokens

__all__ = ["Iterations", "ScheduleMemo", "WARMUP_FRACTION", "Backlog", "backlog", "iterations", "sample_digest", "saturated_rate_per_s", "saturated_schedule", "timed",
           "heavy_traffic_batch", "heavy_traffic_onset"]

_MIN_REQUESTS = 8192  # admissions simulated (passes over the sample until at least this many)
#: the share of admissions discarded as the schedule's warm-up (colocated and chunked schedules)
WARMUP_FRACTION = 0.2


@dataclass(frozen=True)
class Backlog:
    """A saturated schedule's inputs as arrays: computed prompt tokens, output tokens, tokens held
    per request (prompt + cached prefix), KV need (held + reserved output), the caps (``inf`` where
    absent) and the endless backlog's admission order."""
    prompt: np.ndarray
    output: np.ndarray
    hold: np.ndarray
    need: np.ndarray
    kv: float
    slots: float
    order: np.ndarray


def backlog(prompt_tokens: np.ndarray, output_tokens: np.ndarray, cached_tokens: np.ndarray | None,
            reserved_output: np.ndarray | None, kv_capacity_tokens: float | None, max_batch: int | None,
            seed: int, mode: str) -> Backlog:
    """The backlog one saturated schedule admits from (``mode``: the KV reservation's, "decode" or
    "chunked"). Its order is a seeded permutation of the length sample's indices over as many passes
    as give at least 8,192 admissions, without the requests whose KV need exceeds the whole capacity
    (the engine refuses them; they never queue). One backlog for the colocated and the chunked
    schedules, so both read the same requests in the same order."""
    p = np.asarray(prompt_tokens, dtype=float)
    L = np.asarray(output_tokens, dtype=float)
    hold = p if cached_tokens is None else p + np.asarray(cached_tokens, dtype=float)
    need = hold + reserved_tokens(mode, L, reserved_output)
    kv = math.inf if kv_capacity_tokens is None else float(kv_capacity_tokens)
    slots = math.inf if max_batch is None else float(int(max_batch))
    passes = max(1, -(-_MIN_REQUESTS // len(need)))
    order = np.random.default_rng(seed).permutation(np.tile(np.arange(len(need)), passes))
    return Backlog(p, L, hold, need, kv, slots, order[need[order] <= kv])


def saturated_rate_per_s(service: ServiceTimeModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                         kv_capacity_tokens: float | None, max_batch: int | None, max_batch_tokens: int | None,
                         seed: int = 0, cached_tokens: np.ndarray | None = None,
                         reserved_output: np.ndarray | None = None) -> float:
    """Requests per second one instance completes under an endless backlog (module doc); see
    :func:`saturated_schedule` for the arguments."""
    return saturated_schedule(service, prompt_tokens, output_tokens, kv_capacity_tokens, max_batch,
                              max_batch_tokens, seed, cached_tokens, reserved_output)[0]


@dataclass(frozen=True)
class Iterations:
    """A saturated schedule's iterations after the warm-up, apart from their times (they do not
    depend on the times): the prefill iterations' (Σp, Σp², k) rows, the decode runs' batch sizes,
    context sums at their first step and step counts, and the requests completed after the
    warm-up. ``rate`` set instead: the schedule's answer needs no times (no cap, nothing fits,
    no warm-up reached)."""

    prefills: np.ndarray
    run_n: np.ndarray
    run_s: np.ndarray
    run_k: np.ndarray
    completed: int
    rate: tuple[float, float] | None = None


class ScheduleMemo:
    """The last few saturated schedules, by the samples' contents and the caps, and their timed
    answers, by the service object too (an entry holds the service, so its id is not reused).

    A schedule is rate-independent and a pure function of the samples and caps: the planner builds
    one station per instance count and GPU, every pool of the same KV and caps asks for the same
    schedule, a goodput search asks once per rate, and a solve called again in one process resolves
    a new service model over the same samples. Only the timing needs the service. One memo per
    schedule kind (colocated/decode-only here, chunked in :mod:`qmodel.stations.chunked_capacity`)."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._schedules: OrderedDict[tuple, object] = OrderedDict()
        self._timed: OrderedDict[tuple, tuple[ServiceTimeModel, object]] = OrderedDict()

    def get(self, key: tuple, service: ServiceTimeModel, build: Callable[[], object],
            time: Callable[[ServiceTimeModel, object], object]) -> object:
        """``time(service, build())``, with the schedule and the answer kept by ``key``."""
        tkey = (id(service), *key)
        hit = self._timed.get(tkey)
        if hit is not None and hit[0] is service:
            self._timed.move_to_end(tkey)
            return hit[1]
        sched = self._schedules.get(key)
        if sched is None:
            sched = self._schedules[key] = build()
        self._schedules.move_to_end(key)
        out = time(service, sched)
        self._timed[tkey] = (service, out)
        for kept in (self._schedules, self._timed):
            if len(kept) > self._size:
                kept.popitem(last=False)
        return out


_MEMO = ScheduleMemo()


def sample_digest(a: np.ndarray | None) -> bytes | None:
    """A short digest of a length sample (a cache key part; None for None)."""
    if a is None:
        return None
    arr = np.ascontiguousarray(a, dtype=float)
    return hashlib.blake2b(arr.tobytes(), digest_size=16, person=str(arr.shape).encode()[:16]).digest()


def saturated_schedule(service: ServiceTimeModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                       kv_capacity_tokens: float | None, max_batch: int | None, max_batch_tokens: int | None,
                       seed: int = 0, cached_tokens: np.ndarray | None = None,
                       reserved_output: np.ndarray | None = None) -> tuple[float, float]:
    """(requests per second, mean decode batch over decode steps) of one instance under an endless
    backlog (module doc). The iterations are a pure function of the samples and the caps, so the
    last few records are kept by those (:class:`Iterations`); only their times need ``service``
    (two vectorised calls), and the answer is the same numbers as a schedule computed afresh.
    ``reserved_output``: the output tokens each request's KV reservation counts (a ``max_tokens``
    reservation, :func:`qmodel.workload.reserved_output_tokens`); None: its own output.
    """
    key = (sample_digest(prompt_tokens), sample_digest(output_tokens), sample_digest(cached_tokens),
           kv_capacity_tokens, max_batch, max_batch_tokens, seed, sample_digest(reserved_output))
    return _MEMO.get(key, service,
                     lambda: iterations(prompt_tokens, output_tokens, kv_capacity_tokens, max_batch, max_batch_tokens,
                                        seed, cached_tokens, reserved_output),
                     timed)


def timed(service: ServiceTimeModel, it: Iterations) -> tuple[float, float]:
    """(requests per second, mean decode batch over decode steps) of the iterations ``it`` timed
    by ``service``: prefill iterations T_p(Σp, Σp², k), decode runs one step-time call over all
    their steps (a run of k steps from context sum S with n sequences: S + n j at step j)."""
    if it.rate is not None:
        return it.rate
    pa = it.prefills
    t = float(np.sum(service.prefill_time_s(pa[:, 0], pa[:, 1], pa[:, 2]))) if len(pa) else 0.0
    batch = math.inf
    if it.run_k.size:
        n_r, s_r, k_r = it.run_n, it.run_s, it.run_k
        start = np.repeat(np.cumsum(k_r) - k_r, k_r)
        n_s = np.repeat(n_r, k_r)
        j = np.arange(int(k_r.sum())) - start
        t += float(np.sum(service.decode_step_time_s(n_s, np.repeat(s_r, k_r) + n_s * j)))
        batch = float(np.dot(n_r, k_r) / k_r.sum())
    return (it.completed / t if t > 0 else math.inf), batch


def _fixed(rate: float, batch: float) -> Iterations:
    """An :class:`Iterations` whose answer needs no times."""
    empty = np.zeros(0)
    return Iterations(empty.reshape(0, 3), empty, empty, np.zeros(0, dtype=np.int64), 0, (rate, batch))


def iterations(prompt_tokens: np.ndarray, output_tokens: np.ndarray, kv_capacity_tokens: float | None,
               max_batch: int | None, max_batch_tokens: int | None, seed: int,
               cached_tokens: np.ndarray | None, reserved_output: np.ndarray | None = None) -> Iterations:
    """The iterations of :func:`saturated_schedule`, computed (the module doc's schedule).

    ``prompt_tokens`` are the computed (uncached) ones; ``cached_tokens`` (a prefix-cache hit per
    request) are held in KV and in the decode context but not prefilled.
    ``max_batch_tokens`` None: a decode-only instance (disaggregated decode pool): admissions join
    at the next step boundary with no prefill iteration, their prompts' KV arriving by transfer.

    ``inf`` when neither KV nor a slot cap bounds the decode batch (the batch then grows without
    bound and the capacity is the decode chain's, not a schedule's)."""
    if kv_capacity_tokens is None and max_batch is None:
        return _fixed(math.inf, math.inf)
    bl = backlog(prompt_tokens, output_tokens, cached_tokens, reserved_output, kv_capacity_tokens, max_batch, seed,
                 "decode")
    p, L, hold, need, kv, slots, order = bl.prompt, bl.output, bl.hold, bl.need, bl.kv, bl.slots, bl.order
    total = len(order)
    if total == 0:
        return _fixed(0.0, 0.0)
    free = kv
    # running sequences: a heap of (decode step at which it finishes, tie-break, reserved KV, context at join)
    heap: list[tuple[int, int, float, float]] = []
    K = 0            # decode steps so far
    S = 0.0          # sum of the running contexts
    qi = 0
    done = 0
    mark = None  # (prefills, decode runs, completions) at the end of the warm-up
    warm = int(WARMUP_FRACTION * total)
    # the schedule does not depend on the times: record the iterations, time them in two calls
    pre: list[tuple[float, float, float]] = []
    runs: list[tuple[int, float, int]] = []
    pl, nl = p.tolist(), need.tolist()
    # per-request constants of the loop, computed once (the same values it used to compute per admission)
    sql = [x * x for x in pl]
    Ll = L.tolist()
    last = [int(x) - 1 for x in Ll]          # decode steps after the prefill's token
    leaves = [x <= 1 for x in Ll]            # its only token comes from the prefill
    c0l = [x + 1.0 for x in hold.tolist()]   # context at the first decode step
    budget = math.inf if max_batch_tokens is None else max_batch_tokens
    push, pop = heapq.heappush, heapq.heappop
    ol = order.tolist()
    while qi < total:
        h = ol[qi]
        if nl[h] <= free and len(heap) < slots:
            k, tok, sq, freed = 0, 0.0, 0.0, 0.0
            while qi < total:
                h = ol[qi]
                nh = nl[h]
                if not (nh <= free and len(heap) < slots):
                    break
                if k and tok + pl[h] > budget:
                    break
                free -= nh
                tok += pl[h]
                sq += sql[h]
                k += 1
                qi += 1
                if leaves[h]:  # it leaves at the prefill iteration's end
                    freed += nh
                    done += 1
                else:
                    c0 = c0l[h]
                    push(heap, (K + last[h], qi, nh, c0 - K))
                    S += c0
            if max_batch_tokens is not None:
                pre.append((tok, sq, float(k)))
            free += freed
        elif heap:
            n = len(heap)
            steps = heap[0][0] - K
            runs.append((n, S, steps))
            K += steps
            S += n * steps
            while heap and heap[0][0] <= K:
                _, _, sz, off = pop(heap)
                free += sz
                S -= off + K
                done += 1
        else:  # pragma: no cover - a fitting head always exists when nothing runs
            break
        if mark is None and qi >= warm:
            mark = (len(pre), len(runs), done)
    if mark is None:
        return _fixed(math.inf, math.inf)
    ra = runs[mark[1]:]
    arrays = (np.asarray(pre[mark[0]:], dtype=float).reshape(-1, 3), np.array([r[0] for r in ra], dtype=float),
              np.array([r[1] for r in ra], dtype=float), np.array([r[2] for r in ra], dtype=np.int64))
    for a in arrays:  # kept and shared: read-only
        a.flags.writeable = False
    return Iterations(*arrays, done - mark[2])


def heavy_traffic_batch(lam: float, rho: float, k: float, decode_s: float, lam_max: float, b_max: float,
                        batch_time: Callable[[float], float]) -> tuple[float, float]:
    """(rho_p, k): the prefill batch grown by the backlog in heavy traffic.

    ``rho``, ``k``: the light-traffic fixed point's prefill share and batch at per-instance rate
    ``lam``; ``decode_s`` = E[L] d, the decode time per request at the slot cap; ``batch_time(k)``
    the mean prefill iteration of k prompts. Where the fixed point's busy fraction lam E[L] d + rho
    reaches psi = 1 - E[L] d (lam_max - lam), the queue builds until an iteration holds enough
    prompts to keep up: k grows (at most to b_max) until lam (E[L] d + T(k)/k) = psi, i.e. until
    the decode chain's load lam E[L] d / (1 - rho_p) is lam/lam_max; it reaches 1 at the saturated
    limit ``lam_max``, not before. Below the onset the fixed point is returned unchanged.
    """
    psi = 1.0 - decode_s * (lam_max - lam)
    if lam * decode_s + rho < psi:
        return rho, k
    lo, hi = k, float(b_max)
    if lam * (decode_s + batch_time(hi) / hi) >= psi:
        return lam * batch_time(hi) / hi, hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lam * (decode_s + batch_time(mid) / mid) >= psi else (lo, mid)
    return lam * batch_time(hi) / hi, hi


def heavy_traffic_onset(decode_s: float, lam_max: float, fixed_point: Callable[[float], tuple[float, float]]) -> float:
    """The smallest per-instance rate at which :func:`heavy_traffic_batch` departs from the fixed
    point (bisection on lam E[L] d + rho(lam) - psi(lam), 50 steps; lam_max if it never does)."""
    def over(lam: float) -> bool:
        return lam * decode_s + fixed_point(lam)[0] >= 1.0 - decode_s * (lam_max - lam)

    lo, hi = 0.0, lam_max
    if not over(hi * (1.0 - 1e-12)):
        return lam_max
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if over(mid) else (mid, hi)
    return lo
