"""DaemonSet host ports count only on the instance types the DaemonSet would run on.

Upstream's scheduler groups a NodePool's instance types by the DaemonSets that would run on them, each group with
its own host-port usage: a pod wanting a DaemonSet's host port is kept off the types that DaemonSet runs on and only
those, never off every type because some DaemonSet somewhere in the NodePool uses the port.
"""

from __future__ import annotations

from helpers import claim_of, expr, instance_type, pod, scheduled, solve, template

SIZE = "example.com/size"
SMALL = instance_type("small-4", cpu=4, memory_gib=4, labels={SIZE: "small"})
LARGE = instance_type("large-16", cpu=16, memory_gib=16, labels={SIZE: "large"})


def _template():
    on_large = pod("ds-large", cpu="4", memory="4Gi", host_ports=[8080], required=[[expr(SIZE, "In", "large")]])
    on_small = pod("ds-small", cpu="2", memory="2Gi", host_ports=[8081], required=[[expr(SIZE, "In", "small")]])
    return template(types=[SMALL, LARGE], daemons=[on_large, on_small], provider_labels=frozenset({SIZE}))


def test_a_daemonset_port_on_other_types_does_not_block_the_pod():
    p = pod(cpu="1", memory="1Gi", host_ports=[8080], required=[[expr(SIZE, "In", "small")]])
    r = solve(_template(), [p])
    assert r.errors == {} and scheduled(r) == {p.key}
    assert [it.name for it in claim_of(r, p).instance_types] == ["small-4"]


def test_a_daemonset_port_blocks_the_types_that_daemonset_runs_on():
    p = pod(cpu="1", memory="1Gi", host_ports=[8081], required=[[expr(SIZE, "In", "small")]])
    r = solve(_template(), [p])
    assert r.new_nodeclaims == [] and p.key in r.errors
    # with no size asked, the types the 8081 DaemonSet does not run on still take it
    q = pod(cpu="1", memory="1Gi", host_ports=[8081])
    r = solve(_template(), [q])
    assert [it.name for it in claim_of(r, q).instance_types] == ["large-16"]


def test_a_pod_without_a_size_keeps_only_the_types_free_of_its_port():
    p = pod(cpu="1", memory="1Gi", host_ports=[8080])
    r = solve(_template(), [p])
    assert [it.name for it in claim_of(r, p).instance_types] == ["small-4"]
