"""Concurrent launches, lookups and terminations share AWS calls (upstream's batchers), each caller gets its own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .conftest import claim


def test_concurrent_launches_share_createfleet_calls_and_each_claim_gets_its_own_instance(env):
    from karpy.cloudprovider.ec2.batcher import (create_fleet_batcher, describe_instances_batcher,
                                                 terminate_instances_batcher)

    p, nc, faults, account = env
    # A wider window than upstream's 35 ms: the ten callers resolve their launch templates first, and on a
    # loaded two-core CI machine one of them can arrive later than 35 ms after the others.
    window = {"idle": 0.5, "max_wait": 5.0}
    p.fleets = create_fleet_batcher(p.c, **window)
    p.describes = describe_instances_batcher(p.c, **window)
    p.terminations = terminate_instances_batcher(p.c, **window)
    claims = [claim(f"arm-{i}") for i in range(6)] + \
        [claim(f"x86-{i}", arch="amd64", types=("m5.large", "c5.large")) for i in range(4)]
    with ThreadPoolExecutor(len(claims)) as ex:
        out = list(ex.map(p.create, claims))
    # two distinct requests (arm64 and amd64): two CreateFleet calls for ten NodeClaims
    fleets = faults.calls["CreateFleet"]
    assert len(fleets) == 2
    assert sorted(f["TargetCapacitySpecification"]["TotalTargetCapacity"] for f in fleets) == [4, 6]
    # every NodeClaim got a different instance, of the architecture it asked for
    assert [o["metadata"]["name"] for o in out] == [c["metadata"]["name"] for c in claims]
    ids = [o["status"]["providerID"].rsplit("/", 1)[-1] for o in out]
    assert len(set(ids)) == 10
    running = {i["InstanceId"]: i for i in account.instances()}
    assert set(running) == set(ids)
    for o, iid in zip(out, ids):
        want = "c7g.large" if o["metadata"]["name"].startswith("arm") else "c5.large"
        assert running[iid]["InstanceType"] == want == o["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        assert o["status"]["providerID"] == f"aws:///{running[iid]['Placement']['AvailabilityZone']}/{iid}"

    # lookups by id: one DescribeInstances for all of them, each caller sees its own instance
    before = len(faults.calls.get("DescribeInstances", []))
    pids = [o["status"]["providerID"] for o in out]
    with ThreadPoolExecutor(len(pids)) as ex:
        got = list(ex.map(p.get, pids))
    assert [g["status"]["providerID"] for g in got] == pids
    assert len(faults.calls["DescribeInstances"]) - before < len(pids)

    # terminations: merged into fewer TerminateInstances calls, every instance goes
    with ThreadPoolExecutor(len(pids)) as ex:
        list(ex.map(lambda pid: p.delete({"status": {"providerID": pid}}), pids))
    assert 1 <= len(faults.calls["TerminateInstances"]) < len(pids)
    assert sorted(i for f in faults.calls["TerminateInstances"] for i in f["InstanceIds"]) == sorted(ids)
    assert account.instances() == []


def test_partial_capacity_fails_only_the_claims_left_without_an_instance(env):
    from karpy.cloudprovider.ec2.batcher import create_fleet_batcher

    p, nc, faults, account = env
    real = p.fleets

    class Clamp:  # the account has room for two instances: the fleet launches two of the four asked
        def __init__(self, c):
            self.ec2 = self
            self.c = c

        def create_fleet(self, **req):
            req["TargetCapacitySpecification"]["TotalTargetCapacity"] = 2
            out = self.c.ec2.create_fleet(**req)
            out["Errors"] = [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "only two",
                              "LaunchTemplateAndOverrides": {"Overrides": {}}}]
            return out

    p.fleets = create_fleet_batcher(Clamp(p.c))
    try:
        with ThreadPoolExecutor(4) as ex:
            futures = [ex.submit(p.create, claim(f"nc-{i}")) for i in range(4)]
        ok = [f.result() for f in futures if f.exception() is None]
        failed = [f.exception() for f in futures if f.exception() is not None]
    finally:
        p.fleets = real
    assert len(ok) == 2 and len({o["status"]["providerID"] for o in ok}) == 2
    assert len(failed) == 2 and all(type(e).__name__ == "InsufficientCapacityError" for e in failed)
    assert len(account.instances()) == 2
