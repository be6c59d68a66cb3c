"""A deployment shape: which stations it builds and how their solutions make TTFT and TPOT.

A :class:`Topology` owns, for one shape (colocated, chunked, disaggregated, and room for more):

* ``roles``: the stations it is made of, by role, each station named like its role
  (``"colocated"`` or ``"chunked"`` for the one station of a single pool; ``"prefill"``,
  ``"kv_transfer"``, ``"decode"``); the replay's stations carry the same names;
* :meth:`build_station`: one station from the scenario and its resolved inputs
  (:class:`qmodel.build.Resolved`), rate-independent, built once per solver;
* :meth:`limits`: the largest stable total rate per station (the solver's stability check);
* :meth:`compose`: the stations solved at one rate, composed into TTFT and TPOT laws and the SLO
  attainment with its bracket (a :class:`Composition`);
* :meth:`binding_part`, :meth:`link_report`: what the binding explanation adds for this shape;
* :meth:`station_keys`, :meth:`family_group_key`: what each station depends on in a planner's plan
  (its cache keys) and which planner families share their costliest station;
* ``pool_roles`` and ``separate_prefill``: the GPU pools the deployment has (by role, prefill
  first) and whether prefill has a pool of its own; :meth:`pool_configs`, :meth:`prefill_config`,
  :meth:`decode_config` read them from a deployment, :meth:`family_pools` from a planner family;
* ``has_link``: whether KV crosses a link between pools (link resolution, link bandwidth rows);
  :meth:`link_paths`: how many transfer paths it has;
* ``budget_field``: the deployment field of a single pool's token budget; :meth:`families`: the
  planner families of this shape in a search space; ``plot_style``: the TUI's colour for it;
* :meth:`family_label`, :meth:`plan_label`, :meth:`layout`: how the planner, ``compare`` and the
  TUI name a deployment of this shape; :meth:`explain_blocks`: what ``--explain`` adds for it;
* :meth:`perturbations`: the deployment inputs the goodput elasticities perturb, and
  ``unread_fields``: the deployment fields each station is built without (so the perturbed
  scenarios' solvers share the stations a perturbation does not touch, :mod:`qmodel.station_cache`).

A topology instance belongs to one :class:`~qmodel.solver.Solver` (it may cache values that depend
on that solver's resolved inputs); the solver passes itself as the context, from which the topology
reads ``scenario``, ``resolved`` and ``station(role)``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from qmodel.dist import GridDist, LazyGridDist, convolve, sum_cdf
from qmodel.stations.base import Station, StationSolution

if TYPE_CHECKING:
    from qmodel.build import Resolved
    from qmodel.result import LinkReport
    from qmodel.scenario import Scenario
    from qmodel.scenario_deployment import PoolConfig

__all__ = ["Composition", "Topology", "ttft_law", "tpot_law", "decode_pool_settings", "deployment_settings", "station_dispatch",
           "USER_POOL_SETTINGS", "user_pool_settings"]


def station_dispatch(dispatch: str, models_jsq: bool = False) -> str:
    """The dispatch a pool's station models: the pool's own, except ``jsq`` (join the shortest queue by
    request count), read as ``least_loaded`` (least outstanding work). Both steer an arrival to a
    lightly loaded instance, and both approach the central queue of c servers that the pooled
    readings model (prefill: central bulk-service queue; colocated/chunked: the steered backlog;
    decode: pooled GPS). An approximation: JSQ by count ignores the sizes of the queued prompts, so
    it balances work less well than least work left. Measured against the replay's jsq (one example
    per topology, 0.5-0.9 of the limit): median |error| TTFT p50/p90/p99 14.6/10.3/13.7%, TPOT
    2.3/4.0/3.2% (least_loaded itself: 11.1/10.7/17.4%, 2.9/3.8/3.0%: within the replay noise of each
    other); a round-robin reading is worse across breadth (docs/validation.md, "JSQ by count").
    ``models_jsq``: the station models jsq itself (the chunked station: its steered backlog by request
    count, docs/methods.md), and gets it unchanged."""
    return "least_loaded" if dispatch == "jsq" and not models_jsq else dispatch


#: per-pool settings a re-targeted plan keeps where the user set them (None = the default)
USER_POOL_SETTINGS = ("kv_dtype", "compute_dtype", "memory_reserve_bytes")


def decode_pool_settings(cfg: PoolConfig) -> dict[str, Any]:
    """A decoding pool's KV reservation policy where the user set it (re-targeted plans keep it; a
    prefill pool has none)."""
    v = getattr(cfg, "kv_reservation", None)
    return {} if v is None else {"kv_reservation": v}


def deployment_settings(deployment: Any) -> dict[str, Any]:
    """The deployment's context window override where the user set it (a deployment or a kept-settings
    dict): re-targeted plans keep it."""
    v = deployment.get("max_context_tokens") if isinstance(deployment, dict) else deployment.max_context_tokens
    return {} if v is None else {"max_context_tokens": v}


def user_pool_settings(cfg: PoolConfig) -> dict[str, Any]:
    """A pool's KV dtype, compute precision and memory reserve, where the user set them (re-targeted
    plans keep them)."""
    return {k: getattr(cfg, k) for k in USER_POOL_SETTINGS if getattr(cfg, k) is not None}


def ttft_law(solver: Any, terms: list[GridDist], laws: bool) -> tuple[GridDist, float]:
    """(TTFT, its attainment) from its independent terms: composed now (``laws``), else on first
    read with the attainment straight from the terms (sum_cdf)."""
    if laws:
        ttft = convolve(*terms)
        return ttft, float(ttft.cdf(solver.scenario.slo.ttft_s))
    return LazyGridDist(lambda: convolve(*terms)), sum_cdf(terms, solver.scenario.slo.ttft_s)


def tpot_law(solver: Any, terms: list[GridDist], laws: bool) -> tuple[GridDist, float]:
    """(TPOT, its attainment) from its independent terms: composed now (``laws``) or on first read,
    the attainment then straight from the terms (sum_cdf) unless the SLO reads the per-token law."""
    one = len(terms) == 1
    if laws:
        tpot = terms[0] if one else convolve(*terms)
        return tpot, solver.tpot_attainment(tpot)
    slo = solver.scenario.slo
    b = (sum_cdf(terms, slo.tpot_s) if slo.tpot_definition != "per_token"
         else solver.tpot_attainment(terms[0] if one else convolve(*terms)))
    return (terms[0] if one else LazyGridDist(lambda: convolve(*terms))), b


@dataclasses.dataclass(frozen=True)
class Composition:
    """The solved pieces at one rate (for the TUI, the validation harness and --explain).

    Disaggregated ``ttft`` and ``tpot`` are :class:`~qmodel.dist.LazyGridDist`: the attainments come
    from the terms directly (:func:`~qmodel.dist.sum_cdf`), and a goodput search, which reads
    nothing else at most of its rates, never pays for the composed laws there.
    """

    rate_per_s: float
    stations: list[StationSolution]
    ttft: GridDist
    tpot: GridDist
    ttft_attainment: float
    tpot_attainment: float
    attainment: float
    bounds: tuple[float, float]


class Topology(ABC):
    """One deployment shape (see the module doc)."""

    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    #: the deployment's GPU pools by role (its field names), prefill first: ("pool",) when one
    #: pool serves both phases
    pool_roles: ClassVar[tuple[str, ...]]
    #: whether prefill runs on a pool of its own (a planner plan then has two instance counts)
    separate_prefill: ClassVar[bool] = False
    #: whether KV crosses a link between pools (the scenario's ``deployment.link``)
    has_link: ClassVar[bool] = False
    #: whether prefill runs in chunks mixed into decode iterations (vLLM's --enable-chunked-prefill)
    chunked_prefill: ClassVar[bool] = False
    #: deployment fields that the station of each role is built without, by role: scenarios that
    #: differ only there (and in the name, SLO and arrival rate) share that station
    #: (:func:`qmodel.station_cache.station_key`); a field not listed counts as read
    unread_fields: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the roles whose station :meth:`compose` solves at the rate alone (no context from another
    #: station, no copy of the station): a :class:`~qmodel.stations.base.MemoizedStation` there
    #: answers a rate solved before (the planner's and the station cache's shared stations)
    memo_roles: ClassVar[tuple[str, ...]] = ()
    #: the deployment field holding the one pool's token budget (None: a shape whose prefill pool has its own)
    budget_field: ClassVar[str | None] = None
    #: the colour the TUI draws this shape's curves in
    plot_style: ClassVar[str] = "white"

    # ---- the deployment's pools ----------------------------------------------------------------
    def pool_configs(self, deployment: Any) -> list[tuple[str, PoolConfig]]:
        """(role, pool config) per GPU pool of ``deployment``, prefill first."""
        return [(r, getattr(deployment, r)) for r in self.pool_roles]

    def prefill_config(self, deployment: Any) -> PoolConfig:
        """The pool that runs prefill (the one pool of a single-pool shape)."""
        return getattr(deployment, self.pool_roles[0])

    def decode_config(self, deployment: Any) -> PoolConfig:
        """The pool that runs decode (the one pool of a single-pool shape)."""
        return getattr(deployment, self.pool_roles[-1])

    def prefill_token_budget(self, deployment: Any) -> int:
        """The token budget of one prefill batch (a shape without one: the prefill pool's default),
        carried over when ``compare``, the TUI or the planner re-target the deployment."""
        from qmodel.scenario_deployment import PrefillPool

        return PrefillPool.model_fields["max_batch_tokens"].default

    def chunk_budget(self, deployment: Any) -> int:
        """The chunked-prefill token budget per iteration (a shape without one: chunked's default)."""
        from qmodel.scenario_deployment import ChunkedDeployment

        return ChunkedDeployment.model_fields["chunk_tokens"].default

    def link_paths(self, deployment: Any) -> int:
        """KV transfer paths: one per prefill instance where KV crosses a link (0 without a link)."""
        return 0

    @abstractmethod
    def families(self, space: Any, gpus: tuple[str, ...], prefill_gpus: tuple[str, ...],
                 decode_gpus: tuple[str, ...], links: tuple[str, ...]) -> Iterator[Any]:
        """The planner families (:class:`qmodel.planner.space.Family`) of this shape in ``space``."""

    def family_pools(self, fam: Any) -> list[tuple[str, str, int]]:
        """(role, GPU, TP) per pool of a planner family (its ``decode_*`` fields are the one pool's)."""
        return [(r, fam.prefill_gpu or "", fam.prefill_tp or 1) if r == "prefill" else (r, fam.decode_gpu, fam.decode_tp)
                for r in self.pool_roles]

    @abstractmethod
    def build_station(self, role: str, scenario: Scenario, resolved: Resolved) -> Station:
        """The station playing ``role``, built from the scenario and its resolved inputs."""

    def limits(self, solver: Any) -> list[tuple[float, str]]:
        """(largest stable total rate, station name) per station."""
        return [(float(s.max_stable_rate_per_s()), s.name) for s in (solver.station(r) for r in self.roles)]

    @abstractmethod
    def compose(self, solver: Any, rate: float, laws: bool) -> Composition:
        """The stations solved at ``rate`` (already checked stable) and composed (see
        :meth:`qmodel.solver.Solver.compose` for ``laws``)."""

    def attainment_bounds(self, a: float, b: float) -> tuple[float, float]:
        """The bracket of A = P(TTFT <= x, TPOT <= y) from its margins a and b whatever their
        dependence (Fréchet): max(0, a + b - 1) <= A <= min(a, b)."""
        return max(0.0, a + b - 1.0), min(a, b)

    def binding_part(self, solver: Any, c: Composition, metric: str) -> str | None:
        """The largest part of ``metric`` ("TTFT" or "TPOT") at ``c`` in words, where this shape
        can split the metric into parts (None: the station's own account stands)."""
        return None

    def link_report(self, solver: Any, c: Composition) -> LinkReport | None:
        """The KV link's report at ``c`` (None: no link)."""
        return None

    @abstractmethod
    def station_keys(self, plan: Any) -> dict[str, tuple]:
        """Role -> what that station depends on in a planner ``plan`` (beyond the scenario)."""

    @staticmethod
    @abstractmethod
    def family_group_key(fam: Any) -> tuple:
        """Planner families with the same key share their costliest station (solved once per rate)."""

    # ---- re-targeting (the planner's candidates) -----------------------------------------------
    @abstractmethod
    def kept_settings(self, deployment: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(prefill pool, decode pool, deployment) settings of ``deployment`` that a plan of any
        shape re-targeted from it keeps: batch limits, dispatch, KV fraction, dtypes, link options."""

    @abstractmethod
    def plan_deployment(self, plan: Any, pre: dict[str, Any], dec: dict[str, Any], top: dict[str, Any]) -> Any:
        """This shape's deployment at a planner ``plan``'s pools, with settings from :meth:`kept_settings`
        (of the scenario's own shape)."""

    # ---- names and words -----------------------------------------------------------------------
    @abstractmethod
    def family_label(self, fam: Any) -> str:
        """A planner family (a plan without instance counts) in words."""

    @abstractmethod
    def plan_label(self, plan: Any) -> str:
        """A planner plan (a family with instance counts) in words."""

    @abstractmethod
    def layout(self, deployment: Any) -> str:
        """The deployment's instances in a few characters ("4x h100-sxm TP2", "2P+3D ...")."""

    def explain_blocks(self, solver: Any, rate: float, model: Any) -> list[str]:
        """What ``--explain`` shows for this shape before the decode formulas (``model``: the
        ModelSpec whose KV is sized and sent)."""
        return []

    @abstractmethod
    def perturbations(self, deployment: Any) -> list[tuple[str, list[str], float]]:
        """(input name, --set overrides, relative change) for the deployment's goodput elasticities."""
