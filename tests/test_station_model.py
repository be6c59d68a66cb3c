"""The station base (qmodel.stations.base.StationModel): declared parameters checked before anything is
derived, every station immutable once built, variants as new stations.

Exact checks: a bad value raises one InputError naming the scenario path (never a NaN or a numpy
error further on); an assignment to a built station raises FrozenInstanceError; a variant leaves
the station it came from as it was.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from qmodel.errors import InputError
from qmodel.stations.base import Param, Station, StationModel, integer, number, one_of, optional
from qmodel.stations.chunked import ChunkedStation
from qmodel.stations.colocated import ColocatedStation
from qmodel.stations.decode import DecodeStation
from qmodel.stations.kv_transfer import KVTransferStation
from qmodel.stations.prefill import PrefillStation
from tests.des_micro import LinearService

SVC = LinearService(0.010, 0.0001, 0.0, alpha=0.020, gamma=1e-4, gamma2=2e-8)
_rng = np.random.default_rng(3)
P = np.maximum(1.0, np.round(_rng.lognormal(math.log(600), 0.6, 256)))
L = _rng.geometric(1 / 50, 256).astype(float) + 1.0

BUILD = {
    "prefill": lambda **kw: PrefillStation(**{"instances": 2, "service": SVC, "prompt_tokens": P, **kw}),
    "kv_transfer": lambda **kw: KVTransferStation(**{"bytes_per_request": P * 1e5, "bandwidth_bytes_per_s": 1e10,
                                                     **kw}),
    "decode": lambda **kw: DecodeStation(**{"service": SVC, "prompt_tokens": P, "output_tokens": L,
                                            "kv_capacity_tokens": 60_000.0, **kw}),
    "colocated": lambda **kw: ColocatedStation(**{"service": SVC, "prompt_tokens": P, "output_tokens": L, **kw}),
    "chunked": lambda **kw: ChunkedStation(**{"service": SVC, "prompt_tokens": P, "output_tokens": L,
                                              "chunk_tokens": 512, **kw}),
}


@pytest.fixture(scope="module")
def built() -> dict[str, StationModel]:
    return {name: make() for name, make in BUILD.items()}


@pytest.mark.parametrize("name", list(BUILD))
def test_every_station_declares_its_parameters_and_is_named_like_its_role(built, name):
    st = built[name]
    assert isinstance(st, StationModel) and isinstance(st, Station)
    assert st.name == name  # the topology's role and the replay's station carry this name
    declared = {n for p in type(st).params for n in ((p.names,) if isinstance(p.names, str) else p.names)}
    field_names = {f.name for f in dataclasses.fields(st)}
    assert declared and declared <= field_names


@pytest.mark.parametrize("name", list(BUILD))
def test_every_station_is_immutable_once_built(built, name):
    st = built[name]
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.instances = 7 if hasattr(st, "instances") else None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.anything_new = 1  # type: ignore[attr-defined]


BAD = [
    ("prefill", {"instances": 0}, "prefill.instances"),
    ("prefill", {"instances": 1.5}, "prefill.instances"),
    ("prefill", {"dispatch": "fastest"}, "prefill.dispatch"),
    ("prefill", {"ca2": math.nan}, "arrivals.ca2"),
    ("prefill", {"max_batch_tokens": 0.5}, "prefill.max_batch_tokens"),
    ("prefill", {"prompt_tokens": np.zeros(4)}, "prompt_tokens"),
    ("kv_transfer", {"bandwidth_bytes_per_s": math.inf}, "link.bandwidth"),
    ("kv_transfer", {"latency_s": -1.0}, "link.latency"),
    ("kv_transfer", {"paths": 0}, "kv_transfer.paths"),
    ("kv_transfer", {"sharing": "lifo"}, "link_sharing"),
    ("kv_transfer", {"mode": "pipelined"}, "transfer_mode"),
    ("kv_transfer", {"batch_rate_per_s": 1.0}, "batch_arrivals"),
    ("kv_transfer", {"batch_rate_per_s": 1.0, "batch_size_pmf": np.array([-1.0])}, "batch_size_pmf"),
    ("decode", {"output_tokens": L[:10]}, "lengths"),
    ("decode", {"output_tokens": L * 0}, "output_tokens"),
    ("decode", {"instances": 0}, "decode.instances"),
    ("decode", {"dispatch": "x"}, "decode.dispatch"),
    ("colocated", {"instances": 0}, "colocated.instances"),
    ("colocated", {"ca2": -1.0}, "colocated.ca2"),
    ("colocated", {"max_batch_tokens": 0}, "colocated.max_batch_tokens"),
    ("chunked", {"prompt_tokens": P * 0}, "lengths"),
    ("chunked", {"dispatch": "x"}, "chunked.dispatch"),
    ("chunked", {"chunk_tokens": 1}, "chunked.chunk_tokens"),
]


@pytest.mark.parametrize("name,change,where", BAD, ids=[f"{n}-{w}-{i}" for i, (n, _, w) in enumerate(BAD)])
def test_a_value_outside_its_domain_is_one_input_error_naming_its_path(name, change, where):
    with pytest.raises(InputError) as err:
        BUILD[name](**change)
    assert err.value.field == where


def test_domains():
    assert integer(1, "x").test(3) and integer(1, "x").test(np.int64(2)) and integer(1, "x").test(2.0)
    assert not any(integer(1, "x").test(v) for v in (0, 1.5, math.nan, math.inf, "2", None))
    assert number(0.0, above=True, expected="x").test(1e-300) and not number(0.0, above=True, expected="x").test(0.0)
    assert number(0.0, expected="x").test(0.0) and not number(0.0, expected="x").test(-math.inf)
    assert optional(number(1.0, expected="x")).test(None) and not optional(number(1.0, expected="x")).test(0.0)
    assert one_of(("a", "b")).expected == "one of a, b" and not one_of(("a", "b")).test("c")
    p = Param("instances", integer(1, "an integer >= 1"), "{name}.instances")

    class Fake:
        name, instances = "pool", 0

    with pytest.raises(InputError) as err:
        p.check(Fake())
    assert (err.value.field, err.value.value, err.value.allowed) == ("pool.instances", 0, "an integer >= 1")


def test_the_decode_variant_with_reserved_kv_is_a_new_station_and_the_old_one_is_unchanged(built):
    dec = built["decode"]
    before = (dec.kv_reserved_tokens, dec.n_max, dec.chain, dec.a_s, dec.beta_s)
    out = dec.with_reserved_kv(20_000.0)
    assert out is not dec and out.kv_reserved_tokens == 20_000.0 and out.n_max < dec.n_max
    assert (dec.kv_reserved_tokens, dec.n_max, dec.chain, dec.a_s, dec.beta_s) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.n_max = 3  # type: ignore[misc]
    # the variant equals a station built with that reservation
    fresh = BUILD["decode"](kv_reserved_tokens=20_000.0)
    assert (out.n_max, out.a_s, out.beta_s) == (fresh.n_max, fresh.a_s, fresh.beta_s)
    assert out.max_stable_rate_per_s() == fresh.max_stable_rate_per_s()


def test_a_variant_checks_its_changed_declared_parameters_again(built):
    kv = built["kv_transfer"]
    with pytest.raises(InputError) as err:
        kv.evolved({"batch_rate_per_s": 2.0})
    assert err.value.field == "batch_arrivals"
    ok = kv.evolved({"batch_rate_per_s": 2.0, "batch_size_pmf": np.array([0.5, 0.5])})
    assert ok.batch_rate_per_s == 2.0 and kv.batch_rate_per_s is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok.dx = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("example", ["llama3-8b-colocated-h100.yaml", "llama3-8b-chunked-h100.yaml",
                                     "opt13b-disagg-a100.yaml"])
def test_a_station_its_role_and_its_replay_counterpart_carry_one_name(example):
    """Design rule (issue 19): the topology's roles are its stations' names, and the replay's
    stations for that shape are named the same, in the same order."""
    from pathlib import Path

    from qmodel.solver import Solver
    from qmodel.scenario import load_scenario
    from qmodel.validation.replay import replay_plan
    from qmodel.validation.replay_run import WIRING
    from tests.test_replay_engine import busy_trace, mixed_plan

    sc = load_scenario(Path(__file__).resolve().parent.parent / "examples" / example)
    solver = Solver(sc)
    roles = solver.topology.roles
    assert {role: st.name for role, st in solver.stations.items()} == {r: r for r in roles}
    assert solver.topology.name in WIRING
    rep = replay_plan(mixed_plan(solver.topology.name), busy_trace(400), seed=1)
    assert tuple(s.name for s in rep.stations) == roles


def test_the_link_at_another_bandwidth_solves_as_a_station_built_with_it(built):
    """KVTransferStation.with_bandwidth shares the bytes sample; its solution is bit-identical to
    a station built from scratch with that bandwidth (the binding diagnosis's search uses it)."""
    kv = built["kv_transfer"]
    a = kv.with_bandwidth(4e9)
    b = dataclasses.replace(kv, bandwidth_bytes_per_s=4e9)
    assert kv.bandwidth_bytes_per_s == 1e10 and a.bandwidth_bytes_per_s == 4e9
    rate = 0.5 * b.max_stable_rate_per_s()
    assert a.max_stable_rate_per_s() == b.max_stable_rate_per_s()
    sa, sb = a.solve(rate), b.solve(rate)
    assert sa.delay.dx == sb.delay.dx and np.array_equal(sa.delay.pmf, sb.delay.pmf)
    with pytest.raises(InputError):
        kv.with_bandwidth(-1.0)


def test_a_topologys_memoised_and_unread_roles_are_its_station_roles():
    """``memo_roles`` and ``unread_fields`` name stations by role: a name that is not one of the
    topology's roles would silently switch the sharing off (the single pool's role was renamed from
    'pool' to the shape's name, and ``memo_roles = ('pool',)`` then memoised nothing)."""
    from qmodel.topology import TOPOLOGIES

    for name, cls in TOPOLOGIES.items():
        assert cls.memo_roles, name
        assert set(cls.memo_roles) <= set(cls.roles), (name, cls.memo_roles, cls.roles)
        assert set(cls.unread_fields) <= set(cls.roles), (name, set(cls.unread_fields), cls.roles)
