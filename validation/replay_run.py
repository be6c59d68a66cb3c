"""Wiring and running the replay's stations for a topology on the event loop.

disaggregated: :class:`PrefillStation` -> :class:`KVTransferStation` -> :class:`DecodeStation`
(layer-wise transfers start a layer after the batch starts; a request that never fits the decode
KV memory is dropped on arrival); colocated and chunked: one :class:`ColocatedStation` or
:class:`ChunkedStation` pool. Arrivals are scheduled one at a time, and the progress marks before
any arrival, so they shift every real event's sequence number alike.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from qmodel.progress import ProgressFn
from qmodel.validation.replay_plan import ReplayPlan
from qmodel.validation.stations import (ChunkedStation, ColocatedStation, DecodeStation, KVTransferStation,
                                        PrefillStation)
from qmodel.validation.stations.core import Requests, Sim
from qmodel.validation.stations.prefill import PrefixCache
from qmodel.validation.trace_types import Trace

__all__ = ["WIRING", "prefix_cache", "progress_marks", "run_disaggregated", "run_single", "wiring_for"]


def progress_marks(sim: Sim, t_end: float, progress: ProgressFn | None, steps: int = 100) -> int:
    """Schedule ``progress(i, steps, ...)`` at each i/steps of the arrival span; returns how many.
    Scheduled before any arrival, they shift every real event's sequence number alike, so the order
    of real events (and every output) is the same with or without them."""
    if progress is None:
        return 0
    for i in range(1, steps + 1):
        sim.at(t_end * i / steps, lambda k: progress(k, steps, "of the arrivals"), i)
    return steps


def _feed(sim: Sim, req: Requests, admit: Callable[[int], None], clients: int = 0) -> None:
    """Open arrivals (``clients`` 0): scheduled one at a time at the trace's times (keeps the heap
    small). A closed loop of ``clients`` clients: each issues a request at time 0, then its next one
    ``req.think[r]`` seconds after its request r finished (last token) or was dropped; requests are
    numbered in the order they are issued, and ``req.arrival`` is filled as they are."""
    arrival = req.arrival
    n = req.n
    if clients:
        issued = [0]
        think = req.think

        def issue(_: object) -> None:
            r = issued[0]
            if r >= n:
                return
            issued[0] = r + 1
            arrival[r] = sim.now
            admit(r)
            if req.dropped[r]:
                done(r, sim.now)

        def done(r: int, t: float) -> None:
            sim.at(t + think[r], issue, None)

        req.on_done = done
        for _ in range(min(clients, n)):
            sim.at(0.0, issue, None)
        return

    def arrive(r: int) -> None:
        if r + 1 < n:
            sim.at(arrival[r + 1], arrive, r + 1)
        admit(r)

    sim.at(arrival[0], arrive, 0)


def prefix_cache(plan: ReplayPlan, trace: Trace, req: Requests, instances: int) -> PrefixCache:
    """The cache of ``instances`` instances under the plan's prefix law: the hash LRU when the trace
    has hash_ids (unless a mixture is stated; ``trace_hashes`` requires them), else the ratio, for
    the requests ``req.prefix_hit`` marks under a mixture."""
    from qmodel.errors import InputError

    if plan.prefix_law == "trace_hashes" and trace.hash_ids is None:
        raise InputError("workload.prefix_cache", "trace_hashes", f"a trace with hash_ids; {trace.source} has none")
    lru = trace.hash_ids is not None and plan.prefix_law != "mixture"
    return PrefixCache(instances, plan.prefix_hit_ratio, trace.hash_ids if lru else None, trace.block_tokens,
                       plan.prefix_cache_blocks if lru else 0, req.prefix_hit if plan.prefix_law == "mixture" else None)


def run_disaggregated(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, rng: np.random.Generator,
                       window: tuple[float, float]) -> list:
    from_prefill = plan.first_token_from == "prefill"
    decode = DecodeStation(sim, req, plan.decode_model, plan.decode_instances, plan.decode_kv_capacity_tokens,
                           plan.decode_max_batch, plan.decode_dispatch, rng, not from_prefill, window)
    layerwise = plan.transfer_mode == "layerwise"
    layers = max(1, plan.layers) if layerwise else 1
    kv = KVTransferStation(sim, req, plan.prefill_instances, plan.path_bandwidth_bytes_per_s, plan.link_latency_s,
                           plan.link_sharing, layers, decode, decode.ready, window)
    decode.on_release = kv.retry
    bpt, state = plan.kv_bytes_per_token, plan.state_bytes_per_request
    output = req.output
    prompt = req.prompt

    def needs_decode(r: int) -> bool:
        return not (from_prefill and output[r] == 1)

    def batch_start(i: int, batch: list[int], t_s: float, dur: float) -> None:
        items = [(r, bpt * prompt[r] + state) for r in batch if needs_decode(r)]
        if items:
            sim.at(t_s + dur / layers, kv.enter_batch, (i, t_s + dur, items))

    def batch_done(i: int, batch: list[int]) -> None:
        t = sim.now
        items = []
        for r in batch:
            if from_prefill:
                req.t_first[r] = t
                if output[r] == 1:
                    req.finish(r, t)
                    continue
            items.append((r, bpt * prompt[r] + state))
        if items and not layerwise:
            kv.enter_batch((i, t, items))

    cache = prefix_cache(plan, trace, req, plan.prefill_instances)
    prefill = PrefillStation(sim, req, plan.prefill_model, plan.prefill_instances, plan.max_batch_tokens,
                             plan.prefill_dispatch, rng, cache, window, batch_start if layerwise else None, batch_done)

    def admit(r: int) -> None:
        if needs_decode(r) and not decode.fits_ever(r):
            req.dropped[r] = True
            return
        prefill.arrive(r)

    _feed(sim, req, admit, plan.closed_concurrency)
    sim.run()
    return [(prefill, plan.prefill_instances), (kv, plan.prefill_instances), (decode, plan.decode_instances)]


def run_single(plan: ReplayPlan, trace: Trace, req: Requests, sim: Sim, rng: np.random.Generator,
                window: tuple[float, float], cls: type[ColocatedStation] | type[ChunkedStation]) -> list:
    cache = prefix_cache(plan, trace, req, plan.decode_instances)
    st = cls(sim, req, plan, rng, window, cache)

    def admit(r: int) -> None:
        if not st.fits_ever(r):
            req.dropped[r] = True
            return
        st.arrive(r)

    _feed(sim, req, admit, plan.closed_concurrency)
    sim.run()
    return [(st, plan.decode_instances)]


Wiring = Callable[[ReplayPlan, Trace, Requests, Sim, np.random.Generator, tuple[float, float]], list]

#: deployment shape (a :data:`qmodel.topology.TOPOLOGIES` name) -> how the replay wires and runs its
#: stations; the replay keeps its own stations (it is the solver's referee), so only the shape's
#: name is shared with :mod:`qmodel.topology`
WIRING: dict[str, Wiring] = {
    "disaggregated": run_disaggregated,
    "colocated": lambda plan, trace, req, sim, rng, window: run_single(plan, trace, req, sim, rng, window,
                                                                       ColocatedStation),
    "chunked": lambda plan, trace, req, sim, rng, window: run_single(plan, trace, req, sim, rng, window,
                                                                     ChunkedStation),
}


def wiring_for(topology: str) -> Wiring:
    """The replay's wiring of the deployment shape named ``topology``."""
    from qmodel.errors import InputError

    if topology not in WIRING:
        raise InputError("deployment.topology", topology, "one of " + ", ".join(WIRING))
    return WIRING[topology]
