"""aws pkg/providers/instancetype/suite_test.go, Context("Metrics"): every instance type the provider lists for an
EC2NodeClass has its vCPUs and memory exported (karpy.metrics, read at scrape time; here the provider's list is
handed to the registry directly: the operator's wiring is tests/test_metrics_conformance.py's)."""

from __future__ import annotations

from karpy.metrics import KarpenterMetrics

NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}


class Scrape:
    """One scrape of a KarpenterMetrics registry; :meth:`value` answers as the registry's ``get_sample_value``
    does (the first sample of that name and exactly those labels), which collects every series on each call:
    asked once per instance type (~800 in moto), that took minutes."""

    def __init__(self, m: KarpenterMetrics):
        self.samples: dict[tuple[str, frozenset], float] = {}
        for metric in m.registry.collect():
            for sample in metric.samples:
                self.samples.setdefault((sample.name, frozenset(sample.labels.items())), sample.value)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.samples.get((name, frozenset((labels or {}).items())))


def _scraped(env) -> tuple[list, Scrape]:
    p, nc, _, _ = env
    types = p.get_instance_types(NODEPOOL, nc)
    assert len(types) > 100
    m = KarpenterMetrics()
    m.instance_types = lambda: [p.get_instance_types(NODEPOOL, nc)]
    return types, Scrape(m)


def test_vcpu_metrics_for_every_instance_type(env):
    """It("should expose vcpu metrics for instance types")"""
    types, m = _scraped(env)
    for it in types:
        assert m.value("karpenter_cloudprovider_instance_type_cpu_cores", {"instance_type": it.name}) > 0, it.name
    assert m.value("karpenter_cloudprovider_instance_type_cpu_cores", {"instance_type": "m5.large"}) == 2


def test_memory_metrics_for_every_instance_type(env):
    """It("should expose memory metrics for instance types"): EC2's memory, before the VM overhead"""
    types, m = _scraped(env)
    for it in types:
        assert m.value("karpenter_cloudprovider_instance_type_memory_bytes", {"instance_type": it.name}) > 0, it.name
    assert m.value("karpenter_cloudprovider_instance_type_memory_bytes", {"instance_type": "m5.large"}) == 8192 * 2**20


def test_offering_prices_and_availability_for_every_offering(env):
    """aws pkg/controllers/metrics: each offering's price estimate and availability (reserved series at 0 where no
    reservation offers the type)"""
    types, m = _scraped(env)
    m5 = next(t for t in types if t.name == "m5.large")
    for o in m5.offerings:
        labels = {"instance_type": "m5.large", "capacity_type": o.capacity_type, "zone": o.zone}
        assert m.value("karpenter_cloudprovider_instance_type_offering_price_estimate", labels) == o.price
        assert m.value("karpenter_cloudprovider_instance_type_offering_available", labels) == float(o.available)
    zone = m5.offerings[0].zone
    reserved = {"instance_type": "m5.large", "capacity_type": "reserved", "zone": zone}
    assert m.value("karpenter_cloudprovider_instance_type_offering_available", reserved) == 0
    assert m.value("karpenter_cloudprovider_instance_type_offering_price_estimate", reserved) == 0
