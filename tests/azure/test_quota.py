"""The family vCPU quota check (upstream's quota provider): a family whose quota the size would exceed is skipped
for on-demand before any launch is tried; unknown or stale quota data leaves every size available."""

from __future__ import annotations

import pytest

from karpy.cloudprovider.arm.quota import MAX_STALENESS, QuotaRefresher
from karpy.cloudprovider.types import CAPACITY_ON_DEMAND, CAPACITY_SPOT

from .conftest import make_provider
from .test_provider import NODECLASS, claim

DPLS = "standardDPLSv6Family"


@pytest.fixture
def provider(fake, env):
    p, clock = make_provider(lambda kind, name: NODECLASS)
    p.clock = clock
    yield p
    p.close()


def available(provider, name):
    """{capacity type: available in some zone} of instance type ``name``."""
    it = next(t for t in provider.get_instance_types({}, NODECLASS) if t.name == name)
    out: dict[str, bool] = {}
    for o in it.offerings:
        out[o.capacity_type] = out.get(o.capacity_type, False) or o.available
    return out


def test_a_family_without_quota_left_for_the_size_is_skipped_for_on_demand(fake, provider):
    fake.usages[DPLS] = (8, 10)  # 2 vCPUs left
    assert provider.quota.update()
    assert available(provider, "Standard_D2pls_v6") == {CAPACITY_ON_DEMAND: True, CAPACITY_SPOT: True}
    # 4 vCPUs do not fit: no on-demand launch is tried; spot quota is regional and not checked, as upstream
    assert available(provider, "Standard_D4pls_v6") == {CAPACITY_ON_DEMAND: False, CAPACITY_SPOT: True}
    out = provider.create(claim(types=("Standard_D4pls_v6", "Standard_D4als_v6")))
    assert out["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "Standard_D4als_v6"
    assert [r["body"]["properties"]["hardwareProfile"]["vmSize"] for r in fake.calls("PUT", r"/virtualMachines/[^/]+$")] \
        == ["Standard_D4als_v6"]
    # the quota raised (or VMs of the family deleted): the next refresh makes the size available again
    fake.usages[DPLS] = (8, 20)
    assert provider.quota.update()
    assert available(provider, "Standard_D4pls_v6")[CAPACITY_ON_DEMAND] is True


def test_fails_open_without_data_and_when_data_goes_stale(fake, provider):
    fake.usages[DPLS] = (10, 10)
    assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is True  # no usages read yet
    assert provider.quota.update()
    assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is False
    # the usages cannot be read: the last data holds for 15 minutes, then every size is available again
    fake.fail("usages", "InternalServerError", status=500, times=1000)
    provider.clock.t += MAX_STALENESS - 60
    assert not provider.quota.update()
    assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is False
    provider.clock.t += 120
    assert not provider.quota.update()
    assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is True
    # a family the usages do not list is available
    fake.faults.clear()
    del fake.usages[DPLS]
    fake.usages["standardDASv5Family"] = (0, 0)
    assert provider.quota.update()
    assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is True


def test_the_controller_reads_the_usages_in_the_background(fake, provider):
    import time

    fake.usages[DPLS] = (10, 10)
    worker = QuotaRefresher(provider.quota)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert available(provider, "Standard_D2pls_v6")[CAPACITY_ON_DEMAND] is False
    finally:
        worker.stop()
    assert fake.calls("GET", r"/providers/Microsoft\.Compute/locations/eastus/usages$")
