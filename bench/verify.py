"""An independent checker for the benchmark placements.

It uses only the solver's *output* (which pods went to which NodeClaim, each
NodeClaim's requirements and instance types) and what the generators asked for
(bench pods' CPU, memory, labels and constraints). Zones come from the
NodeClaim's requirements when pinned to one zone, otherwise from the offering
karpy.provisioning.launch.launch_candidates would launch first.
"""

from __future__ import annotations

from collections import Counter, defaultdict

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


def check_diverse(pods, results, instance_types, info: dict | None = None) -> list[str]:
    """All the makeDiversePods invariants; returns the list of violations (empty = PASS).

    ``info``, when given, receives figures that are reported but do not fail the check.
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
                    if label == "final":
                        problems.append(f"zone spread: {p.name} (selector my-label={v}) placed in {zone} with counts "
                                        f"{ {z: counts[z] for z in all_zones} }: skew {skew} > 1")
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
    if n >= 5 and len(results.new_nodeclaims) != n // 5:
        problems.append(f"{len(results.new_nodeclaims)} nodes, expected N//5 = {n // 5}")
    return problems
