"""Leader election on the Lease karpenter-leader-election, on the in-memory API server and a fake clock."""

from __future__ import annotations

from karpy.controller.leader import LEASE_NAME, LeaderElector
from karpy.kube.memory import MemoryAPI


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def pair(api=None):
    api = api or MemoryAPI(history=True)
    ca, cb = Clock(), Clock()
    a = LeaderElector(api, "kube-system", "a", now=ca, wall=lambda: 1.7e9 + ca.t)
    b = LeaderElector(api, "kube-system", "b", now=cb, wall=lambda: 1.7e9 + cb.t)
    return api, a, b, ca, cb


def lease(api):
    return api.get("Lease", LEASE_NAME, "kube-system")


def test_first_candidate_creates_the_lease_and_leads():
    api, a, b, ca, cb = pair()
    assert a.try_acquire_or_renew() and a.is_leader
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z") and "." in spec["renewTime"]  # MicroTime
    assert not b.try_acquire_or_renew() and not b.is_leader


def test_a_standby_takes_over_once_the_lease_is_not_renewed_for_its_duration():
    api, a, b, ca, cb = pair()
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(10):  # the leader renews every 2 s: the standby never sees it expire
        ca.t += 2
        cb.t += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # the leader stops (killed): 14 s later the lease is still live, at 15 s it is b's
    cb.t += 14
    assert not b.try_acquire_or_renew()
    cb.t += 2
    assert b.try_acquire_or_renew()
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    ca.t += 30
    assert not a.try_acquire_or_renew()  # the old leader finds the lease taken


def test_released_lease_is_taken_at_once():
    api, a, b, ca, cb = pair()
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    spec = lease(api)["spec"]
    assert not spec.get("holderIdentity") and spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()  # no waiting: the holder is empty
    # as client-go counts it: a released Lease taken by another candidate is a transition
    assert lease(api)["spec"]["holderIdentity"] == "b" and lease(api)["spec"]["leaseTransitions"] == 1


def test_two_candidates_racing_on_one_version_only_one_wins():
    api, a, b, ca, cb = pair()
    assert a.try_acquire_or_renew()
    a.release()
    stale = lease(api)

    class Stale:  # b read the lease before a wrote it again
        def __init__(self, api):
            self.api = api

        def get(self, *args):
            return stale

        def __getattr__(self, n):
            return getattr(self.api, n)

    assert a.try_acquire_or_renew()
    b.api = Stale(api)
    assert not b.try_acquire_or_renew()  # 409 Conflict: a won
    assert lease(api)["spec"]["holderIdentity"] == "a"


def test_run_loop_reports_leadership_and_loss():
    api, a, b, ca, cb = pair()
    a.retry_period = 0.01
    started, lost = [], []
    t = a.start(lambda: started.append(1), lambda: lost.append(1))
    for _ in range(500):
        if started:
            break
        t.join(0.01)
    assert started
    # someone else takes the lease over (as if ours had expired): the leader notices and reports the loss
    obj = lease(api)
    api.update({**obj, "spec": {**obj["spec"], "holderIdentity": "intruder"}})
    t.join(5)
    assert lost and not a.is_leader and a.lost
