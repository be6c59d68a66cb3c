"""Saturated capacity of a chunked-prefill instance: its schedule under an endless backlog and a slot cap.

The engine (the replay's ``validation/stations/chunked.py``): every iteration has a budget of B
tokens; each of the n running sequences takes one, the rest c = B - n goes to prompt chunks FCFS,
first the prompts already being prefilled, then the waiting head and the requests behind it while
a slot (``max_batch``) is free and their prompt + reserved output fit the free KV. A request holds
its slot and KV from the start of its prefill to its last token; it joins the decode batch at the
end of the iteration computing its last prompt token (a one-token request leaves there). With no
prompt work admissible (no slot or KV free, nothing in prefill, or n >= B) the engine runs decode
steps until the next sequence finishes. Under an endless backlog the choices do not depend on
arrival times, so the iteration sequence is a deterministic function of the length sample and the
caps, and the capacity is

    lam_sat = (requests completed) / (sum of the iterations' times),

a mixed iteration of chunks c_j over d_j computed tokens with n decodes of context sum S taking
T_p(sum c_j + n, sum (c_j^2 + 2 c_j d_j), k) + t_d(n, S) - t_d(n, 0), a decode step t_d(n, S).

Why not the fluid limit's packing: at saturation each departure frees one slot, so a mixed
iteration carries the one or two prompts the last departures made room for, not a token budget's
worth (corpus-ci c0028: 2.39 of 4 slots decoding in a mixed iteration); the fluid per-prompt work
spreads an iteration's fixed cost over prompts the engine cannot hold (+13..+52% on the cases of
``benchmarks/chunked_slot_limit.py``; docs/validation.md, "Chunked limit with a binding slot cap").

Start: staggered, at most one admission per iteration until the first departure. With identical
lengths the slots admitted together leave together and are refilled together, so the schedule
keeps its start's groups forever; the replay's limit is the fully staggered one (near the limit
the backlog empties and arrivals are admitted one at a time, which splits groups). With random
lengths the start is forgotten within the warm-up. The sample is taken in a seeded permutation
(several passes, at least 8,192 admissions), the first fifth discarded as warm-up.

Returned with the rate (:class:`ChunkedSaturation`): the mixed iterations' mean prompts, prompt
tokens, decodes and time (c0028: 1 prompt of 512 tokens with 3 decodes, where the budget's packing
puts 1 + 4092/512 prompts; docs/validation.md, "Chunked limit with a binding slot cap"). The schedule
is rate-independent, so it is kept by its samples and caps (timed answers by the service object): a
goodput search, and every station over the same inputs, computes it once.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass

import numpy as np

from qmodel.perf.base import ServiceTimeModel
from qmodel.stations.capacity import WARMUP_FRACTION, ScheduleMemo, backlog, sample_digest

__all__ = ["ChunkedSaturation", "chunked_saturated_rate_per_s", "chunked_saturation"]

_EMPTY_MIXED = np.zeros((0, 5))
_EMPTY_RUNS = np.zeros((0, 3))


@dataclass(frozen=True)
class ChunkedSaturation:
    """The saturated schedule's rate and its mixed iterations' means (after the warm-up).

    ``prompts_per_mixed`` k_s: prompts chunked in a mixed iteration; ``prompt_tokens_per_mixed``
    c_s: their prompt tokens; ``decodes_per_mixed`` n_s: the sequences decoding in it;
    ``mixed_time_s``: its mean time. NaN statistics where there are no mixed iterations
    (an uncapped instance: ``rate_per_s`` inf, the fluid limit applies)."""

    rate_per_s: float
    prompts_per_mixed: float = math.nan
    prompt_tokens_per_mixed: float = math.nan
    decodes_per_mixed: float = math.nan
    mixed_time_s: float = math.nan


@dataclass(frozen=True)
class _Schedule:
    """The iterations after the warm-up (service-independent): mixed rows (tokens incl. decodes,
    attention, chunks, n, S), decode runs (n, S at the first step, steps), completions."""

    mixed: np.ndarray
    runs: np.ndarray
    completed: int
    rate: float | None = None


# the chunked schedules and their timed answers (capacity.ScheduleMemo: rate-independent, kept by
# the samples and caps, so a goodput search and every station over them computes one once)
_MEMO = ScheduleMemo()


def chunked_saturated_rate_per_s(service: ServiceTimeModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                                 kv_capacity_tokens: float | None, max_batch: int | None, budget: int,
                                 seed: int = 0, cached_tokens: np.ndarray | None = None,
                                 reserved_output: np.ndarray | None = None) -> float:
    """Requests per second one chunked instance completes under an endless backlog (module doc);
    :func:`chunked_saturation`'s ``rate_per_s``."""
    return chunked_saturation(service, prompt_tokens, output_tokens, kv_capacity_tokens, max_batch, budget, seed,
                              cached_tokens, reserved_output).rate_per_s


def chunked_saturation(service: ServiceTimeModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                       kv_capacity_tokens: float | None, max_batch: int | None, budget: int,
                       seed: int = 0, cached_tokens: np.ndarray | None = None,
                       reserved_output: np.ndarray | None = None) -> ChunkedSaturation:
    """The saturated schedule of one chunked instance (module doc), kept by its inputs.

    ``prompt_tokens`` are the computed (uncached) ones; ``cached_tokens`` (a prefix hit per request)
    are held in KV and in the decode context, not computed. Rate ``inf`` when neither KV nor a slot
    cap bounds the decode batch (the fluid limit then applies); 0 when no request fits the KV."""
    key = (sample_digest(prompt_tokens), sample_digest(output_tokens), sample_digest(cached_tokens),
           kv_capacity_tokens, max_batch, int(budget), seed, sample_digest(reserved_output))
    return _MEMO.get(key, service,
                     lambda: _schedule(prompt_tokens, output_tokens, kv_capacity_tokens, max_batch, budget, seed,
                                       cached_tokens, reserved_output),
                     _timed)


def _schedule(prompt_tokens: np.ndarray, output_tokens: np.ndarray, kv_capacity_tokens: float | None,
              max_batch: int | None, budget: int, seed: int, cached_tokens: np.ndarray | None,
              reserved_output: np.ndarray | None) -> _Schedule:
    """The iteration sequence under an endless backlog (module doc), apart from its times."""
    if kv_capacity_tokens is None and max_batch is None:
        return _Schedule(_EMPTY_MIXED, _EMPTY_RUNS, 0, math.inf)
    bl = backlog(prompt_tokens, output_tokens, cached_tokens, reserved_output, kv_capacity_tokens, max_batch, seed,
                 "chunked")
    p, L, hold, need, kv, slots, order = bl.prompt, bl.output, bl.hold, bl.need, bl.kv, bl.slots, bl.order
    cached = hold - p
    total = len(order)
    if total == 0:
        return _Schedule(_EMPTY_MIXED, _EMPTY_RUNS, 0, 0.0)
    pl, cl, nl = p.tolist(), cached.tolist(), need.tolist()
    last = [int(x) - 1 for x in L.tolist()]   # decode steps after the prefill's token
    c0l = [x + 1.0 for x in hold.tolist()]    # context at the first decode step
    ol = order.tolist()
    B = int(budget)
    free, held = kv, 0          # free KV, slots held (prefilling + decoding)
    heap: list[tuple[int, int, float, float]] = []  # (decode step it finishes at, tie, KV, context - K at join)
    pref: list[list[float]] = []  # prompts in prefill: [request, tokens computed (cached included), tokens to compute]
    K, S, qi, done = 0, 0.0, 0, 0
    staggered = True  # one admission per iteration until the first departure (module doc)
    warm, mark = int(WARMUP_FRACTION * total), None
    mixed: list[tuple[float, float, float, float, float]] = []  # (tokens incl. decodes, attention, chunks, n, S)
    runs: list[tuple[int, float, int]] = []                      # decode runs (n, S at the first step, steps)
    push, pop = heapq.heappush, heapq.heappop

    def retire() -> None:
        nonlocal free, held, S, done, staggered
        while heap and heap[0][0] <= K:
            _, _, sz, off = pop(heap)
            free += sz
            held -= 1
            S -= off + K
            done += 1
            staggered = False

    while qi < total:
        n = len(heap)
        room = B - n
        h = ol[qi]
        head_in = nl[h] <= free and held < slots
        if room > 0 and (pref or head_in):
            tok = sq = 0.0
            chunks: list[tuple[list[float], float]] = []
            for item in pref:
                if room <= 0:
                    break
                c = min(room, item[2] - item[1] + cl[int(item[0])])
                chunks.append((item, c))
                tok += c
                sq += c * c + 2.0 * c * item[1]
                room -= c
            admitted = 0
            while room > 0 and qi < total and not (staggered and admitted):
                h = ol[qi]
                if not (nl[h] <= free and held < slots):
                    break
                free -= nl[h]
                held += 1
                qi += 1
                admitted += 1
                item = [float(h), cl[h], pl[h]]
                pref.append(item)
                c = min(room, pl[h])
                chunks.append((item, c))
                tok += c
                sq += c * c + 2.0 * c * item[1]
                room -= c
            mixed.append((tok + n, sq, float(len(chunks)), float(n), S))
            if n:
                K += 1
                S += n
                retire()
            for item, c in chunks:
                item[1] += c
            for item in [it for it in pref if it[1] >= it[2] + cl[int(it[0])]]:
                pref.remove(item)
                r = int(item[0])
                if last[r] <= 0:  # its only token comes from the prefill
                    free += nl[r]
                    held -= 1
                    done += 1
                    staggered = False
                else:
                    push(heap, (K + last[r], qi, nl[r], c0l[r] - K))
                    S += c0l[r]
        elif heap:
            steps = heap[0][0] - K
            runs.append((n, S, steps))
            K += steps
            S += n * steps
            retire()
        else:  # pragma: no cover - a fitting head always exists when nothing runs
            break
        if mark is None and qi >= warm:
            mark = (len(mixed), len(runs), done)
    if mark is None:
        return _Schedule(_EMPTY_MIXED, _EMPTY_RUNS, 0, math.inf)
    return _Schedule(np.asarray(mixed[mark[0]:], dtype=float).reshape(-1, 5),
                     np.asarray(runs[mark[1]:], dtype=float).reshape(-1, 3), done - mark[2])



def _timed(service: ServiceTimeModel, sched: _Schedule) -> ChunkedSaturation:
    """The schedule's iterations timed by ``service``: a mixed iteration
    T_p(tokens + n, attention, k) + t_d(n, S) - t_d(n, 0); a decode run of k steps from context sum S
    with n sequences, S + n j at step j (one step-time call over all steps)."""
    if sched.rate is not None:
        return ChunkedSaturation(sched.rate)
    ma = sched.mixed
    t = 0.0
    stats = ChunkedSaturation(math.nan)
    if len(ma):
        n_m = np.maximum(ma[:, 3], 1.0)
        dec = np.where(ma[:, 3] > 0, np.asarray(service.decode_step_time_s(n_m, ma[:, 4]), dtype=float)
                       - np.asarray(service.decode_step_time_s(n_m, 0.0), dtype=float), 0.0)
        t_mix = np.asarray(service.prefill_time_s(ma[:, 0], ma[:, 1], ma[:, 2]), dtype=float) + dec
        t += float(np.sum(t_mix))
        stats = ChunkedSaturation(math.nan, float(ma[:, 2].mean()), float((ma[:, 0] - ma[:, 3]).mean()),
                                  float(ma[:, 3].mean()), float(t_mix.mean()))
    ra = sched.runs
    if len(ra):
        k_r = ra[:, 2].astype(np.int64)
        start = np.repeat(np.cumsum(k_r) - k_r, k_r)
        n_s = np.repeat(ra[:, 0], k_r)
        j = np.arange(int(k_r.sum())) - start
        t += float(np.sum(service.decode_step_time_s(n_s, np.repeat(ra[:, 1], k_r) + n_s * j)))
    rate = sched.completed / t if t > 0 else math.inf
    return dataclasses.replace(stats, rate_per_s=rate)
