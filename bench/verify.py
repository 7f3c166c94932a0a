"""An independent checker for the benchmark placements.

It uses only the solver's *output* (which pods went to which NodeClaim, each
NodeClaim's requirements and instance types) and what the generators asked for
(bench pods' CPU, memory, labels and constraints). Zones come from the
NodeClaim's requirements when pinned to one zone, otherwise from the offering
karpy.provisioning.launch.launch_candidates would launch first.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from fractions import Fraction

from _util import ZONE, allocatable, nodeclaim_zone, single_value

CPU, MEMORY, PODS = "cpu", "memory", "pods"


def check_fit(nodeclaims, requested_of) -> list[str]:
    """Every instance type a NodeClaim lists (so its cheapest, and the launched one) holds its pods.

    ``requested_of(pod_name) -> (cpu_m, mem_bytes)``.
    """
    problems = []
    for nc in nodeclaims:
        if not nc.instance_types:
            problems.append(f"{nc.hostname}: no instance types")
            continue
        cpu = sum(requested_of(p.name)[0] for p in nc.pods)
        mem = sum(requested_of(p.name)[1] for p in nc.pods)
        daemon = nc.template.daemon_overhead or {}
        need = {CPU: cpu + daemon.get(CPU, 0), MEMORY: mem + daemon.get(MEMORY, 0), PODS: len(nc.pods) + daemon.get(PODS, 0)}
        cheapest = nc.instance_types[0]
        for it in nc.instance_types:
            alloc = allocatable(it)
            over = [k for k, v in need.items() if v > alloc.get(k, 0)]
            if over:
                which = "cheapest " if it is cheapest else ""
                problems.append(f"{nc.hostname}: {which}type {it.name} too small for {over} "
                                f"(need {need}, allocatable { {k: alloc.get(k, 0) for k in need} })")
                break
    return problems


def check_diverse(pods, results, instance_types, info: dict | None = None, final_zones: bool = True) -> list[str]:
    """All the makeDiversePods invariants; returns the list of violations (empty = PASS).

    ``info``, when given, receives figures that are reported but do not fail the check.
    ``final_zones``: check zone spread with every pod counted in its NodeClaim's final zone (what
    karpy's ZonePinning gate guarantees); without it (upstream's decisions) those skews are only counted
    in ``info['zone_spread_final_violations']``.
    """
    problems: list[str] = []
    by_name = {p.name: p for p in pods}
    n = len(pods)

    # 1. every pod placed exactly once, on a new NodeClaim
    if results.errors:
        sample = list(results.errors.items())[:3]
        problems.append(f"{len(results.errors)} pods unschedulable, e.g. {sample}")
    if any(results.existing.values()):
        problems.append("pods placed on existing nodes, but there are none")
    seen = Counter(p.name for nc in results.new_nodeclaims for p in nc.pods)
    dup = [k for k, c in seen.items() if c > 1]
    if dup:
        problems.append(f"{len(dup)} pods placed twice, e.g. {dup[:3]}")
    missing = [k for k in by_name if k not in seen]
    if missing:
        problems.append(f"{len(missing)} pods not placed, e.g. {missing[:3]}")
    unknown = [k for k in seen if k not in by_name]
    if unknown:
        problems.append(f"{len(unknown)} unknown pods placed, e.g. {unknown[:3]}")
    hostnames = Counter(nc.hostname for nc in results.new_nodeclaims)
    if any(c > 1 for c in hostnames.values()):
        problems.append("duplicate NodeClaim hostnames")

    # 2. resources
    problems += check_fit(results.new_nodeclaims, lambda name: (by_name[name].cpu_m, by_name[name].mem_bytes))

    # placement maps
    zone_of_node = {}
    for nc in results.new_nodeclaims:
        z = nodeclaim_zone(nc)
        if z is None:
            problems.append(f"{nc.hostname}: no launchable offering, so no zone")
        zone_of_node[nc.hostname] = z
    node_of_pod = {p.name: nc.hostname for nc in results.new_nodeclaims for p in nc.pods}
    placed = [by_name[k] for k in node_of_pod if k in by_name]
    if any(z is None for z in zone_of_node.values()):
        return problems
    all_zones = sorted({o.zone for it in instance_types for o in it.offerings if o.available})

    # 3-4. topology spread, replayed in placement order.
    #
    # A spread constraint is checked when the constrained pod is placed, against the pods
    # placed before it (kube-scheduler and Karpenter alike), so a final-state count is not the
    # invariant: smaller pods that merely carry a matching label may legally join a domain
    # afterwards. The checker replays the placements in the order Karpenter takes pods --
    # largest first (CPU, then memory), pods with identical constraints and requests together
    # in the order their first pod appears in the input -- and checks every spread pod then.
    #
    # Zone counts are what the cluster will see: every pod counted in the zone its NodeClaim
    # launches in. (Upstream's Topology.Record only counts a pod once its NodeClaim's zone is
    # known, so upstream can break this; karpy pins a NodeClaim's zone as soon as it takes a
    # pod that some zone spread counts. The 'known' replay, upstream's view, is reported only.)
    # Hostnames are always known. The global minimum for hostname spread is 0 (a new node is
    # always possible); for zones it is taken over every zone the instance types offer.
    first_of_class: dict = {}

    def class_of(p):
        return (p.kind, tuple(sorted(p.labels.items())), tuple(sorted(p.spread_selector.items())), p.cpu_m, p.mem_bytes)

    for i, p in enumerate(pods):
        first_of_class.setdefault(class_of(p), i)
    order = sorted(range(n), key=lambda i: (-pods[i].cpu_m, -pods[i].mem_bytes, first_of_class[class_of(pods[i])], i))

    zone_constrained = {"zone-spread", "zone-affinity"}
    pinned_nodes: set = set()
    zone_known = defaultdict(Counter)  # selector value -> zone -> count, as the scheduler knows it
    zone_final = defaultdict(Counter)  # same, with every pod counted in its NodeClaim's final zone
    host_counts = defaultdict(Counter)  # hostname -> my-label value -> count
    late_pin = 0
    final_violations = 0
    for i in order:
        p = pods[i]
        if p.name not in node_of_pod:
            continue
        node = node_of_pod[p.name]
        zone = zone_of_node[node]
        own = p.labels.get("my-label")
        if p.kind in zone_constrained:
            pinned_nodes.add(node)
        if p.kind == "host-spread":
            v = p.spread_selector["my-label"]
            c = host_counts[node][v] + (1 if own == v else 0)
            if c > 1:
                problems.append(f"hostname spread: {p.name} (selector my-label={v}) placed on {node} "
                                f"where {host_counts[node][v]} selected pods already were: skew {c} > 1")
        if p.kind == "zone-spread":
            v = p.spread_selector["my-label"]
            for counts, label in ((zone_known[v], "known"), (zone_final[v], "final")):
                skew = counts[zone] + (1 if own == v else 0) - min(counts[z] for z in all_zones)
                if skew > 1:
                    if label == "final" and final_zones:
                        problems.append(f"zone spread: {p.name} (selector my-label={v}) placed in {zone} with counts "
                                        f"{ {z: counts[z] for z in all_zones} }: skew {skew} > 1")
                    elif label == "final":
                        final_violations += 1
                    else:
                        late_pin += 1
        if own is not None:
            host_counts[node][own] += 1
            zone_final[own][zone] += 1
            if node in pinned_nodes:
                zone_known[own][zone] += 1
    for nc in results.new_nodeclaims:
        if nc.hostname in pinned_nodes and single_value(nc.requirements, ZONE) is None:
            problems.append(f"{nc.hostname} holds zone-constrained pods but its requirements do not pin one zone")
    if info is not None:
        # What the cluster would look like: every pod counted in the zone it lands in.
        final_skew = 0
        for p in pods:
            if p.kind == "zone-spread":
                v = p.spread_selector["my-label"]
                c = zone_final[v]
                final_skew = max(final_skew, max(c[z] for z in all_zones) - min(c[z] for z in all_zones))
        info["zone_spread_final_skew"] = final_skew
        info["zone_spread_late_pin_violations"] = late_pin
        info["zone_spread_final_violations"] = final_violations
        info["unpinned_nodeclaims"] = sum(1 for nc in results.new_nodeclaims if nc.hostname not in pinned_nodes)

    # 5. zone affinity: each my-affininity group in one zone
    groups = defaultdict(set)
    for p in placed:
        if p.kind == "zone-affinity":
            groups[p.labels["my-affininity"]].add(zone_of_node[node_of_pod[p.name]])
    for v, zs in sorted(groups.items()):
        if len(zs) != 1:
            problems.append(f"zone affinity group my-affininity={v} spans zones {sorted(map(str, zs))}")

    # 6. hostname anti-affinity: at most one app=nginx pod per node
    nginx = Counter(node_of_pod[p.name] for p in placed if p.labels.get("app") == "nginx")
    crowded = {k: c for k, c in nginx.items() if c > 1}
    if crowded:
        problems.append(f"anti-affinity: {len(crowded)} nodes with more than one nginx pod, e.g. {list(crowded.items())[:3]}")

    # 7. node count: one node per nginx pod, everything else packed onto them
    if n >= 5 and not n // 5 <= len(results.new_nodeclaims) <= 1.05 * (n // 5):
        problems.append(f"{len(results.new_nodeclaims)} nodes, expected N//5 = {n // 5} to 1.05 x N//5")
    return problems


# --- the LP bound (shared by basic.py and e2e.py) ---------------------------------------------------------------------

def _det3(m):
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))


def _solve3(cols, b):
    """Cramer's rule for B z = b, B given by its three columns; None when singular."""
    B = [[cols[j][i] for j in range(3)] for i in range(3)]
    d = _det3(B)
    if d == 0:
        return None
    z = []
    for j in range(3):
        Bj = [[(b[i] if k == j else B[i][k]) for k in range(3)] for i in range(3)]
        z.append(_det3(Bj) / d)
    return z


def lp_lower_bound(types, prices, demand):
    """Exact optimum of min price.x s.t. alloc.x >= demand, x >= 0 (three resources).

    ``types``: list of (name, (cpu, mem, pods)); ``prices``: list of Fraction; ``demand``: 3 ints.
    Returns (bound, [(name, x)], dual y) with the dual checked feasible (so the bound is optimal).
    """
    rows = len(demand)
    assert rows == 3
    cols = [tuple(Fraction(v) for v in a) for _, a in types]
    cost = list(prices)
    names = [n for n, _ in types]
    for r in range(rows):  # surplus columns: -e_r, cost 0
        cols.append(tuple(Fraction(-1 if i == r else 0) for i in range(rows)))
        cost.append(Fraction(0))
        names.append(f"(surplus {('cpu', 'memory', 'pods')[r]})")
    b = [Fraction(v) for v in demand]
    best = None
    for S in itertools.combinations(range(len(cols)), rows):
        z = _solve3([cols[j] for j in S], b)
        if z is None or any(v < 0 for v in z):
            continue
        val = sum(cost[j] * z[k] for k, j in enumerate(S))
        if best is None or val < best[0]:
            best = (val, S, z)
    if best is None:
        raise RuntimeError("LP infeasible: no allowed instance type")
    val, S, z = best
    # dual: y^T B = c_B  ->  solve B^T y = c_B
    BT_cols = [[cols[j][i] for j in S] for i in range(rows)]  # columns of B^T are rows of B
    y = _solve3(BT_cols, [cost[j] for j in S])
    ok = all(v >= 0 for v in y) and all(
        sum(cols[t][i] * y[i] for i in range(rows)) <= cost[t] for t in range(len(types)))
    if not ok:
        raise RuntimeError("LP dual check failed: the basis found is not optimal")
    dual_val = sum(b[i] * y[i] for i in range(rows))
    assert dual_val == val
    return val, [(names[j], z[k]) for k, j in enumerate(S) if z[k] != 0], y




def lp_cover(demand, types) -> Fraction:
    """LP bound for ``demand`` (cpu, memory, pods) over ``types`` [(price, cpu, memory, pods)]."""
    named = [(f"t{i}", (c, m, p)) for i, (_, c, m, p) in enumerate(types)]
    val, _, _ = lp_lower_bound(named, [t[0] for t in types], demand)
    return val


# --- replaying `karpy simulate` output ---------------------------------------------------------

_UNITS = {"m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40}


def _q(s) -> Fraction:
    s = str(s)
    for u in sorted(_UNITS, key=len, reverse=True):
        if s.endswith(u):
            return Fraction(s[: -len(u)]) * _UNITS[u]
    return Fraction(s)


def _matches(selector: dict | None, labels: dict) -> bool:
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or ():
        op, vals, have = e["operator"], e.get("values") or [], labels.get(e["key"])
        if op == "In" and have not in vals or op == "NotIn" and have in vals:
            return False
        if op == "Exists" and e["key"] not in labels or op == "DoesNotExist" and e["key"] in labels:
            return False
    return True


class _Group:
    """Pods matching one (namespace, selector) counted per domain of one topology key, with a
    histogram of the counts over every domain present, so the minimum is cheap."""

    def __init__(self, ns, selector, key):
        self.ns, self.selector, self.key = ns, selector, key
        self.counts: Counter = Counter()
        self.hist: Counter = Counter()  # count -> number of present domains with that count
        self.domains: Counter = Counter()  # domain -> number of present nodes in it

    def selects(self, ns, labels) -> bool:
        return ns == self.ns and _matches(self.selector, labels)

    def add_domain(self, d):
        if self.domains[d] == 0:
            self.hist[self.counts[d]] += 1
        self.domains[d] += 1

    def remove_domain(self, d):
        self.domains[d] -= 1
        if self.domains[d] == 0:
            del self.domains[d]
            self.hist[self.counts[d]] -= 1

    def bump(self, d, delta):
        if self.domains[d] > 0:
            self.hist[self.counts[d]] -= 1
            self.hist[self.counts[d] + delta] += 1
        self.counts[d] += delta

    def minimum(self) -> int:
        return min((c for c, n in self.hist.items() if n > 0), default=0)


def replay_binds(output: dict) -> list[str]:
    """Replay a `karpy simulate -o json` run's binds in Event order and report every bind that
    kube-scheduler would have refused at that moment.

    Nodes enter at their ``NodeReady`` Event and leave at ``RemovingNode``; pods enter at their
    ``Scheduled`` Event and leave at ``Killing``/``Evicted``/``Preempted``. At each bind it checks,
    from the Pod and Node objects alone: resources (the requests of the pods on the node within
    its allocatable), required pod anti-affinity both ways, required pod affinity, and
    DoNotSchedule topology spreads with the minimum taken over every domain of every node present
    (the benchmark pods carry no node affinity, so every node is eligible). Counts are kept per
    (namespace, selector, topology key) group and domain, so each bind costs a few lookups.
    """
    items = output["items"]
    pods = {f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": p for p in items if p["kind"] == "Pod"}
    nodes = {n["metadata"]["name"]: n for n in items if n["kind"] == "Node"}
    present: dict[str, dict] = {}
    where: dict[str, str] = {}
    groups: dict[tuple, _Group] = {}
    owners: dict[tuple, _Group] = {}  # anti-affinity terms of placed pods, counted per domain
    problems: list[str] = []

    def meta(p):
        return p["metadata"].get("namespace", "default"), p["metadata"].get("labels") or {}

    def group(table, ns, selector, key):
        gk = (ns, json.dumps(selector, sort_keys=True), key)
        g = table.get(gk)
        if g is None:
            g = table[gk] = _Group(ns, selector, key)
            for n in present.values():
                if key in n["labels"]:
                    g.add_domain(n["labels"][key])
            if table is groups:
                for pk, node in where.items():
                    d = present[node]["labels"].get(key) if node in present else None
                    if d is not None and g.selects(*meta(pods[pk])):
                        g.bump(d, 1)
        return g

    def requests(p):
        out = Counter()
        for c in p["spec"].get("containers") or ():
            for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
                out[k] += _q(v)
        out["pods"] += 1
        return out

    def anti_terms(p):
        aff = (p["spec"].get("affinity") or {}).get("podAntiAffinity") or {}
        return aff.get("requiredDuringSchedulingIgnoredDuringExecution") or ()

    def move(key, node, delta):
        p = pods[key]
        ns, labels = meta(p)
        n = present[node]
        for g in groups.values():
            d = n["labels"].get(g.key)
            if d is not None and g.selects(ns, labels):
                g.bump(d, delta)
        for t in anti_terms(p):
            g = group(owners, ns, t.get("labelSelector"), t["topologyKey"])
            d = n["labels"].get(t["topologyKey"])
            if d is not None:
                g.bump(d, delta)
        n["used"] = n["used"] + requests(p) if delta > 0 else n["used"] - requests(p)

    for e in items:
        if e["kind"] != "Event":
            continue
        inv, reason = e["involvedObject"], e["reason"]
        if inv["kind"] == "Node" and reason == "NodeReady" and inv["name"] in nodes:
            n = nodes[inv["name"]]
            present[inv["name"]] = {"labels": n["metadata"].get("labels") or {},
                                    "alloc": {k: _q(v) for k, v in n["status"]["allocatable"].items()},
                                    "used": Counter()}
            for table in (groups, owners):
                for g in table.values():
                    if g.key in present[inv["name"]]["labels"]:
                        g.add_domain(present[inv["name"]]["labels"][g.key])
        elif inv["kind"] == "Node" and reason == "RemovingNode" and inv["name"] in present:
            for pk in [pk for pk, nn in where.items() if nn == inv["name"]]:
                move(pk, inv["name"], -1)
                del where[pk]
            for table in (groups, owners):
                for g in table.values():
                    if g.key in present[inv["name"]]["labels"]:
                        g.remove_domain(present[inv["name"]]["labels"][g.key])
            del present[inv["name"]]
        elif inv["kind"] == "Pod" and reason in ("Killing", "Evicted", "Preempted"):
            key = f"{inv.get('namespace', 'default')}/{inv['name']}"
            node = where.pop(key, None)
            if node in present and key in pods:
                move(key, node, -1)
        elif inv["kind"] == "Pod" and reason == "Scheduled":
            key = f"{inv.get('namespace', 'default')}/{inv['name']}"
            node = e["message"].rsplit(" to ", 1)[-1]
            p = pods.get(key)
            if p is None or node not in present:
                continue
            why = _inadmissible(p, node, present, group, groups, owners, meta)
            if why:
                problems.append(f"{e['lastTimestamp']} {key} -> {node}: {why}")
            where[key] = node
            move(key, node, +1)
    return problems


def _inadmissible(p, node, present, group, groups, owners, meta) -> str | None:
    ns, labels = meta(p)
    target = present[node]
    need = Counter()
    for c in p["spec"].get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            need[k] += _q(v)
    need["pods"] += 1
    for k, v in need.items():
        if target["used"][k] + v > target["alloc"].get(k, 0):
            return f"{k} over allocatable"
    aff = p["spec"].get("affinity") or {}
    for t in ((aff.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
        g = group(groups, ns, t.get("labelSelector"), t["topologyKey"])
        d = target["labels"].get(t["topologyKey"])
        if d is not None and g.counts[d] > 0:
            return f"anti-affinity: {g.counts[d]} matching pod(s) in {t['topologyKey']}={d}"
    for g in owners.values():
        d = target["labels"].get(g.key)
        if d is not None and g.counts[d] > 0 and g.selects(ns, labels):
            return f"a placed pod's anti-affinity covers {g.key}={d}"
    for t in ((aff.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
        g = group(groups, ns, t.get("labelSelector"), t["topologyKey"])
        d = target["labels"].get(t["topologyKey"])
        if sum(g.counts.values()) == 0:
            if not _matches(t.get("labelSelector"), labels):
                return "affinity: no matching pod anywhere"
        elif d is None or g.counts[d] == 0:
            return f"affinity: no matching pod in {t['topologyKey']}={d}"
    for c in p["spec"].get("topologySpreadConstraints") or ():
        if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        g = group(groups, ns, c.get("labelSelector"), c["topologyKey"])
        d = target["labels"].get(c["topologyKey"])
        if d is None:
            return f"node has no {c['topologyKey']}"
        skew = g.counts[d] + (1 if g.selects(ns, labels) else 0) - g.minimum()
        if skew > int(c.get("maxSkew", 1)):
            return f"spread on {c['topologyKey']}: {d} would reach skew {skew} > {c.get('maxSkew', 1)}"
    return None
