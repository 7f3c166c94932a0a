"""Capacity reservations counted while the provisioner's scheduler builds NodeClaims (upstream's ReservationManager).

Upstream's catalog for these cases: small (2 cpu) and medium (3 cpu) types with one reserved instance each in
test-zone-1, a large (6 cpu) type without reservation. Each NodeClaim of a solve holds one instance of every
reservation it could launch into; a pod that would need a reservation other NodeClaims already hold waits for the
next solve (no lighter NodePool, no on-demand, no relaxed preference), and the next solve, once the launches have
used the reservations, falls back. Engine cases solve the scheduler as the provisioner runs it (strict mode); the
two-solve cases run the provisioner and the simulated cloud in the controller harness.
"""

from __future__ import annotations

from controllers.harness import Harness, nodepool as h_nodepool, pod as h_pod
from helpers import (
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_ZONE,
    affinity_term,
    claim_of,
    expr,
    instance_type,
    nodepool,
    pod,
    solve,
    template,
)
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_RESERVED, CAPACITY_SPOT, LABEL_CAPACITY_TYPE, Offering
from karpy.scheduling.reservations import RESERVED_OFFERING_ERROR

APP = {"app": "test"}
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")


def _offers(price: float, reservations: dict[str, int] | None = None, left: bool = True) -> list[Offering]:
    out = [Offering(z, ct, price * (0.7 if ct == CAPACITY_SPOT else 1.0)) for z in ZONES
           for ct in (CAPACITY_ON_DEMAND, CAPACITY_SPOT)]
    for rid, count in (reservations or {}).items():
        out.append(Offering("test-zone-1", CAPACITY_RESERVED, price / 100_000, available=left and count > 0,
                            reservation_id=rid, reservation_capacity=count if left else 0))
    return out


def _catalog(small: dict[str, int] | None = None, left: bool = True):
    small = {"r-small": 1} if small is None else small
    return [instance_type("large", cpu=6, memory_gib=6, offers=_offers(0.6)),
            instance_type("medium", cpu=3, memory_gib=3, offers=_offers(0.3, {"r-medium": 1}, left)),
            instance_type("small", cpu=2, memory_gib=2, offers=_offers(0.2, small, left))]


def _spread_pods(n: int, *terms: dict, preferred=None):
    """Pods that each want a node of their own (hostname anti-affinity), requiring ``terms``."""
    return [pod(f"p{i}", cpu="1", labels=APP, pod_anti_affinity=[affinity_term(LABEL_HOSTNAME, APP)],
                required=[[expr(LABEL_INSTANCE_TYPE, "In", "small"), *(t(i) if callable(t) else t for t in terms)]],
                preferred=preferred)
            for i in range(n)]


def _solve(templates, pods):
    return solve(templates, pods, reserved_strict=True, upstream_packing=True)


def _reserved(claim) -> bool:
    return sorted(claim.requirements.get(LABEL_CAPACITY_TYPE).values) == [CAPACITY_RESERVED]


def _waits(r, p) -> bool:
    return RESERVED_OFFERING_ERROR in r.errors.get(p.key, "")


def test_one_reservation_listed_by_two_nodepools_is_held_once():
    types = _catalog()
    ps = _spread_pods(2, lambda i: expr(LABEL_NODEPOOL, "In", f"np-{i + 1}"))
    r = _solve([template(nodepool("np-1"), types), template(nodepool("np-2"), types)], ps)
    (claim,) = r.new_nodeclaims
    assert claim.template.nodepool == "np-1" and _reserved(claim)
    assert _waits(r, ps[1])


def test_distinct_reservations_of_one_type_in_two_nodepools_are_held_separately():
    ps = _spread_pods(2, lambda i: expr(LABEL_NODEPOOL, "In", f"np-{i + 1}"))
    r = _solve([template(nodepool("np-1"), _catalog()), template(nodepool("np-2"), _catalog({"r-distinct": 1}))], ps)
    assert r.errors == {}
    assert sorted(c.template.nodepool for c in r.new_nodeclaims) == ["np-1", "np-2"]
    assert all(_reserved(c) for c in r.new_nodeclaims)


def test_two_reservations_of_one_type_are_held_until_both_are_full():
    ps = _spread_pods(4)
    r = _solve([template(nodepool("np-1"), _catalog({"r-small": 1, "r-small-2": 2}))], ps)
    # three instances in all, but each NodeClaim holds one of every reservation it could use: 1+2 lets two claims
    assert len(r.new_nodeclaims) == 2 and all(_reserved(c) for c in r.new_nodeclaims)
    assert sum(_waits(r, p) for p in ps) == 2


def test_no_fallback_to_a_lighter_nodepool_while_the_heavier_one_has_a_reservation():
    ps = _spread_pods(2)
    primary = template(nodepool("np-primary", weight=100), _catalog())
    fallback = template(nodepool("np-fallback", weight=50), _catalog({"r-fallback": 1}))
    r = _solve([primary, fallback], ps)
    (claim,) = r.new_nodeclaims
    assert claim.template.nodepool == "np-primary" and _reserved(claim)
    assert _waits(r, ps[1])
    # the next solve: the launch used the primary's reservation: the pod goes on-demand in the heavier NodePool
    primary = template(nodepool("np-primary", weight=100), _catalog(left=False))
    r = _solve([primary, fallback], ps[1:])
    (claim,) = r.new_nodeclaims
    assert claim.template.nodepool == "np-primary" and not _reserved(claim)


def test_a_reservation_held_elsewhere_does_not_relax_preferences():
    prefer_np1 = [(1, [expr(LABEL_NODEPOOL, "In", "np-1")])]
    ps = _spread_pods(2, preferred=prefer_np1)
    types = _catalog()
    r = _solve([template(nodepool("np-1"), types), template(nodepool("np-2"), types)], ps)
    (claim,) = r.new_nodeclaims
    assert claim.template.nodepool == "np-1" and _reserved(claim)
    assert _waits(r, ps[1])
    # once the reservation is used up the pod keeps its preference for np-1, on-demand
    types = _catalog(left=False)
    r = _solve([template(nodepool("np-1"), types), template(nodepool("np-2"), types)], ps[1:])
    (claim,) = r.new_nodeclaims
    assert claim.template.nodepool == "np-1" and not _reserved(claim)


def test_several_pods_share_one_reserved_nodeclaim():
    terms = [expr(LABEL_INSTANCE_TYPE, "In", "small"), expr(LABEL_NODEPOOL, "In", "np-1"),
             expr(LABEL_CAPACITY_TYPE, "In", CAPACITY_RESERVED), expr(LABEL_ZONE, "In", "test-zone-1")]
    ps = [pod(f"p{i}", cpu="500m", labels=APP, required=[terms], pod_affinity=[affinity_term(LABEL_ZONE, APP)])
          for i in range(2)]
    r = _solve([template(nodepool("np-1"), _catalog())], ps)
    assert r.errors == {}
    (claim,) = r.new_nodeclaims
    assert claim_of(r, ps[0]) is claim_of(r, ps[1]) is claim and _reserved(claim)


def test_bulk_packing_stops_where_the_reservation_would_be_lost():
    # three 1800m pods: one fits small or medium (both reserved), two need large (none): one pod per solve
    ps = [pod(f"p{i}", cpu="1800m") for i in range(3)]
    r = _solve([template(nodepool("np-1"), _catalog())], ps)
    (claim,) = r.new_nodeclaims
    assert len(claim.pods) == 1 and _reserved(claim)
    assert sum(_waits(r, p) for p in ps) == 2


# --- two provisioning passes against the simulated cloud ----------------------------------------------------------

def _provision(h: Harness, *names: str) -> None:
    for n in names:
        h.reconcile("provisioner.trigger.pod", f"default/{n}")
    h.tick(h.settings.batch_idle)
    h.reconcile("provisioner")


def test_the_pod_left_waiting_gets_on_demand_once_the_reservation_is_used():
    h = Harness()
    it = {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c-2x-amd64-linux"]}
    both = (CAPACITY_RESERVED, CAPACITY_ON_DEMAND)
    h.setup(h_nodepool("np-1", capacity=both, requirements=[it]), h_nodepool("np-2", capacity=both, requirements=[it]))
    h.cloud.set_reservations([{"id": "r-small", "instanceType": "c-2x-amd64-linux", "zone": "test-zone-a", "count": 1}])
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [affinity_term(LABEL_HOSTNAME, APP)]}}
    h.create(*(h_pod(f"w{i}", labels=APP, node_selector={LABEL_NODEPOOL: f"np-{i + 1}"}, affinity=anti,
                     unschedulable=True) for i in range(2)))
    _provision(h, "w0", "w1")
    (first,) = h.nodeclaims()
    assert first["metadata"]["labels"][LABEL_NODEPOOL] == "np-1"
    assert not [e for e in h.events("FailedScheduling") if e["involvedObject"]["name"] == "w1"]
    launched = h.launch(first["metadata"]["name"])
    assert launched["metadata"]["labels"][LABEL_CAPACITY_TYPE] == CAPACITY_RESERVED
    assert launched["metadata"]["labels"]["karpy.dev/reservation-id"] == "r-small"
    h.tick(10)
    _provision(h, "w0", "w1")
    second = [c for c in h.nodeclaims() if c["metadata"]["name"] != first["metadata"]["name"]]
    assert len(second) == 1 and second[0]["metadata"]["labels"][LABEL_NODEPOOL] == "np-2"
    launched = h.launch(second[0]["metadata"]["name"])
    assert launched["metadata"]["labels"][LABEL_CAPACITY_TYPE] == CAPACITY_ON_DEMAND
